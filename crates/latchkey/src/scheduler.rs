//! Scheduled jobs that run once per fleet: [`Client::scheduler`].
//!
//! Every node of a service registers the same jobs in a group and runs [`Scheduler::run`];
//! each occurrence of a job runs on exactly one of them. A group keeps, in its own cluster
//! slot, one hash per job (its schedule, next occurrence, last token, the unfinished run and
//! the last finished one), one lock-layout hash per job run (the claim, whose lease the
//! claiming node's watchdog renews) and an index of when each job needs a node next; its
//! channel wakes the nodes when that changes. Scripts do every change (scripts/sched_*.lua).
//!
//! - **Claims.** A node that finds an occurrence due claims it with one script call, which
//!   checks the due time against the server's clock (node clocks never decide it), moves the
//!   job's next occurrence past it and takes the run's lease, all at once: two nodes cannot
//!   claim one occurrence. The claim has a fencing token, `max(last + 1, server clock in
//!   µs)` as a lock's: increasing also when a failover lost the last claim.
//! - **Retries.** A node that dies while running an occurrence stops renewing its lease; when
//!   the lease has run out, the next node to look claims the same occurrence again, with a
//!   higher token and the attempt number + 1 (at-least-once). Its `lost()` fired before that,
//!   on its own clock, as a lock's does; the run's future is dropped then.
//! - **Waking.** A node sleeps until the earliest time a job needs a node (its next
//!   occurrence, or the end of a run's lease), by the server's clock as the last reply told
//!   it, and wakes early when the group's channel says the index changed. Between occurrences
//!   a group costs Redis nothing.

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures_util::FutureExt;
use rand::seq::SliceRandom;
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::client::Client;
use crate::error::{Error, Result};
use crate::guard::{attempt_hold, Claim, GuardCore, Holds};
use crate::keys::{check_name, object_name, prefix_name};
use crate::metrics::{self, Site};
use crate::pubsub::WakePolicy;
use crate::replica::AcquireCall;
use crate::scripts::{self, Invoke};
use crate::task::Task;
use crate::wait::{unexpected, Attempt};
use crate::watchdog::Lease;
use crate::{FencingToken, Lost};

/// How long a group's keys live past a job's next occurrence without a claim or a
/// registration: a group whose nodes are all gone leaves nothing behind a week after its
/// last job was due.
const IDLE: Duration = Duration::from_secs(7 * 24 * 3600);

/// How long a node waits between two tries when Redis cannot be reached.
const BACKOFF: Duration = Duration::from_secs(1);

/// How long a stopping node waits for the hand-backs of the runs it stops.
const HAND_BACK: Duration = Duration::from_secs(5);

/// Errors that trying again cannot mend: they end [`Scheduler::run_until`].
fn fatal(e: &Error) -> bool {
    e.is_wrong_type() || e.is_invalid_argument() || e.is_permission_denied()
}

/// When a job runs: every `interval`, or on a cron schedule in a time zone.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use latchkey_redis::Schedule;
///
/// let five_minutes = Schedule::every(Duration::from_secs(300))?;
/// let nightly = Schedule::cron("0 0 2 * * *")?; // 02:00:00 UTC
/// let paris = Schedule::cron("0 30 9 * * MON-FRI")?
///     .in_time_zone(latchkey_redis::chrono_tz::Europe::Paris);
/// assert_eq!(nightly.to_string(), "cron 0 0 2 * * * (UTC)");
/// # Ok::<(), latchkey_redis::Error>(())
/// ```
#[derive(Clone)]
pub struct Schedule(ScheduleKind);

#[derive(Clone)]
enum ScheduleKind {
    /// Every `interval` ms, at the multiples of it since the Unix epoch.
    Every(u64),
    Cron(Box<CronSchedule>),
}

#[derive(Clone)]
struct CronSchedule {
    text: String,
    cron: croner::Cron,
    tz: chrono_tz::Tz,
}

impl Schedule {
    /// Every `interval`, at the multiples of it since the Unix epoch (UTC): every 5 minutes is
    /// at :00, :05, :10…, on every node alike. At least one second, whole milliseconds.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for an interval under a second or over a year.
    pub fn every(interval: Duration) -> Result<Schedule> {
        if interval < Duration::from_secs(1) || interval > Duration::from_secs(366 * 24 * 3600) {
            return Err(Error::invalid(
                "interval",
                format!("{interval:?} is out of range; use 1 s to 1 year"),
            ));
        }
        Ok(Schedule(ScheduleKind::Every(interval.as_millis() as u64)))
    }

    /// A cron expression: five fields (minute hour day-of-month month day-of-week) or six
    /// with seconds first, with the usual lists, ranges, steps and names, `L`, `W`, `#` and
    /// the `@daily`-style nicknames, as the croner crate reads them. In UTC unless
    /// [`Schedule::in_time_zone`] says otherwise.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for an expression croner refuses, saying why.
    pub fn cron(expression: &str) -> Result<Schedule> {
        let cron = croner::parser::CronParser::builder()
            .seconds(croner::parser::Seconds::Optional)
            .build()
            .parse(expression)
            .map_err(|e| Error::invalid("cron expression", format!("`{expression}`: {e}")))?;
        Ok(Schedule(ScheduleKind::Cron(Box::new(CronSchedule {
            text: expression.trim().to_owned(),
            cron,
            tz: chrono_tz::UTC,
        }))))
    }

    /// The same cron schedule read in time zone `tz` (its local times, daylight-saving changes
    /// included). An interval schedule is the same in every zone.
    pub fn in_time_zone(self, tz: chrono_tz::Tz) -> Schedule {
        match self.0 {
            ScheduleKind::Cron(mut c) => {
                c.tz = tz;
                Schedule(ScheduleKind::Cron(c))
            }
            every => Schedule(every),
        }
    }

    /// The first occurrence strictly after `after_ms` (Unix ms); `None` when there is none.
    fn next_after(&self, after_ms: i64) -> Option<i64> {
        match &self.0 {
            ScheduleKind::Every(p) => {
                let p = *p as i64;
                Some((after_ms.div_euclid(p) + 1) * p)
            }
            ScheduleKind::Cron(c) => {
                let at = chrono::DateTime::from_timestamp_millis(after_ms)?.with_timezone(&c.tz);
                let next = c.cron.find_next_occurrence(&at, false).ok()?;
                Some(next.timestamp_millis())
            }
        }
    }
}

impl fmt::Display for Schedule {
    /// `every 300000 ms`, `cron 0 0 2 * * * (UTC)`: the text every node of a group registers.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            ScheduleKind::Every(ms) => write!(f, "every {ms} ms"),
            ScheduleKind::Cron(c) => write!(f, "cron {} ({})", c.text, c.tz),
        }
    }
}

impl fmt::Debug for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Schedule({self})")
    }
}

/// What happens to the occurrences that came due while no node could run them (every node
/// down, or a run that outlasted the next occurrences): an occurrence is *missed* when the
/// occurrence after it is due too by the time a node claims it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Missed {
    /// Run none of them, nor the latest one due: the job runs again at its next occurrence.
    Skip,
    /// Run once for all of them, as the latest occurrence due (the default).
    #[default]
    RunOnce,
    /// Run each of them, oldest first, one after the other, then the current one; at most
    /// `max` missed ones (the older ones beyond that are skipped).
    RunEach {
        /// The most missed occurrences run.
        max: u32,
    },
}

/// What happens to an occurrence that comes due while a run of the job is still going on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Overlap {
    /// It is skipped (the default): never two runs of one job at once.
    #[default]
    Skip,
    /// It waits for the run to end, and then runs (late); occurrences due meanwhile beyond it
    /// are missed ones ([`Missed`]).
    Queue,
}

/// How a job runs: see [`Scheduler::job`].
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use latchkey_redis::{JobOptions, Missed, Overlap};
///
/// let options = JobOptions::new()
///     .missed(Missed::Skip)
///     .overlap(Overlap::Queue)
///     .max_runtime(Duration::from_secs(600));
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct JobOptions {
    missed: Missed,
    overlap: Overlap,
    max_runtime: Option<Duration>,
}

impl JobOptions {
    /// The defaults: [`Missed::RunOnce`], [`Overlap::Skip`], no run-time limit.
    pub fn new() -> JobOptions {
        JobOptions::default()
    }

    /// What happens to missed occurrences.
    pub fn missed(self, missed: Missed) -> JobOptions {
        JobOptions { missed, ..self }
    }

    /// What happens to an occurrence due while a run goes on.
    pub fn overlap(self, overlap: Overlap) -> JobOptions {
        JobOptions { overlap, ..self }
    }

    /// The longest a run may take: its future is dropped then, and the run is recorded as
    /// `timed out` (not retried).
    pub fn max_runtime(self, max_runtime: Duration) -> JobOptions {
        JobOptions {
            max_runtime: Some(max_runtime),
            ..self
        }
    }
}

/// One run of an occurrence of a job, handed to the job's handler.
///
/// # Examples
///
/// ```no_run
/// # async fn f(client: latchkey_redis::Client) -> latchkey_redis::Result<()> {
/// let scheduler = client.scheduler("billing");
/// scheduler.every("sweep", std::time::Duration::from_secs(60), |run: latchkey_redis::Run| async move {
///     // Give the token to the storage you write to: a retried run has a higher one.
///     println!("{} due at {:?}, attempt {}, token {}", run.job(), run.due(), run.attempt(), run.fencing_token());
///     // Work handed to another task is told when the claim is lost (the run's own future is
///     // dropped then).
///     let lost = run.lost();
///     let work = tokio::spawn(async move {
///         tokio::select! {
///             _ = lost => Err("the claim was lost".to_owned()),
///             result = async { Ok(()) } => result,
///         }
///     });
///     work.await.map_err(|e| e.to_string())?
/// })?;
/// # Ok(())
/// # }
/// ```
pub struct Run {
    job: Arc<str>,
    due: SystemTime,
    attempt: u32,
    /// The claim (one more guard of it): the run is ended in Redis once the handler is done
    /// with this too.
    claim: GuardCore<JobHold>,
}

impl fmt::Debug for Run {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Run")
            .field("job", &self.job)
            .field("due", &self.due)
            .field("token", &self.claim.fencing_token())
            .field("attempt", &self.attempt)
            .field("lost", &self.claim.is_lost())
            .finish()
    }
}

impl Run {
    /// The job's name.
    pub fn job(&self) -> &str {
        &self.job
    }

    /// When the occurrence was due (its time on the schedule).
    pub fn due(&self) -> SystemTime {
        self.due
    }

    /// The run's fencing token: strictly larger than every earlier run's of this job (a
    /// retry of an occurrence gets a higher one than the attempt before it).
    pub fn fencing_token(&self) -> FencingToken {
        self.claim.fencing_token()
    }

    /// 1 for the first attempt at the occurrence, more for retries after a node died.
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// Resolves when the node lost its claim of the run (its lease ran out, the watchdog
    /// could not renew it): another node may run the occurrence now. The run's future is
    /// dropped at once then; this is for what that does not stop — tasks the handler spawned,
    /// a process it started.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only waits.
    pub fn lost(&self) -> Lost {
        self.claim.lost()
    }

    /// Whether the claim is known to be lost (see [`Run::lost`]).
    pub fn is_lost(&self) -> bool {
        self.claim.is_lost()
    }
}

/// A job's state, from [`Scheduler::jobs`].
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct JobInfo {
    /// The job's name.
    pub name: String,
    /// Its schedule, as registered (`every 60000 ms`, `cron 0 0 2 * * * (UTC)`).
    pub schedule: String,
    /// Its next occurrence not claimed yet.
    pub next_due: Option<SystemTime>,
    /// The run going on (or whose node died, until another node retries it).
    pub running: Option<JobRun>,
    /// The last run that ended, with its outcome.
    pub last: Option<JobRun>,
    /// How many occurrences were skipped ([`Missed`], [`Overlap`]).
    pub skipped: u64,
}

/// A run of a job in a [`JobInfo`].
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct JobRun {
    /// The owner id of the node's claim (`<client id>:<n>`: see
    /// [`Client::client_info`](crate::Client::client_info)).
    pub owner: String,
    /// Its fencing token.
    pub token: FencingToken,
    /// The occurrence it runs.
    pub due: SystemTime,
    /// When the claim was made.
    pub started: SystemTime,
    /// When it ended (`None` while it goes on).
    pub finished: Option<SystemTime>,
    /// `ok`, `failed: <error>`, `timed out`, `panicked` (`None` while it goes on).
    pub outcome: Option<String>,
    /// The attempt (more than 1 for retries).
    pub attempt: u32,
}

type Handler = dyn Fn(Run) -> Pin<Box<dyn Future<Output = std::result::Result<(), String>> + Send>>
    + Send
    + Sync;

/// A registered job.
struct Job {
    name: Arc<str>,
    schedule: Schedule,
    options: JobOptions,
    handler: Arc<Handler>,
    keys: JobKeys,
}

struct JobKeys {
    job: String,
    run: Arc<str>,
}

/// The jobs of one group on one node: see [`Client::scheduler`].
#[derive(Clone)]
pub struct Scheduler {
    inner: Arc<SchedulerInner>,
}

struct SchedulerInner {
    client: Client,
    group: String,
    /// The group's object name in Redis (namespaced).
    object: String,
    index: Arc<str>,
    channel: Arc<str>,
    jobs: Mutex<Vec<Arc<Job>>>,
    grace: Mutex<Duration>,
}

impl fmt::Debug for Scheduler {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let jobs: Vec<Arc<str>> = self.registered().iter().map(|j| j.name.clone()).collect();
        f.debug_struct("Scheduler")
            .field("group", &self.inner.group)
            .field("jobs", &jobs)
            .finish()
    }
}

impl Client {
    /// The scheduler of the job group `group`: register jobs with [`Scheduler::job`] (or
    /// [`Scheduler::every`], [`Scheduler::cron`]) and drive them with [`Scheduler::run`] on
    /// every node; each occurrence runs on one node. Making it sends nothing.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> latchkey_redis::Result<()> {
    /// let client = latchkey_redis::Client::connect("redis://127.0.0.1:6379").await?;
    /// let scheduler = client.scheduler("reports");
    /// scheduler.cron("nightly", "0 0 2 * * *", |run: latchkey_redis::Run| async move {
    ///     println!("the report due at {:?}, on this node only", run.due());
    ///     Ok::<(), String>(())
    /// })?;
    /// scheduler.run_until(async { let _ = tokio::signal::ctrl_c().await; }).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn scheduler(&self, group: impl Into<String>) -> Scheduler {
        let group = group.into();
        let object = object_name(self.namespace(), &group);
        Scheduler {
            inner: Arc::new(SchedulerInner {
                client: self.clone(),
                index: Arc::from(prefix_name("latchkey_jobs", &object)),
                channel: Arc::from(prefix_name("latchkey_jobs_channel", &object)),
                object,
                group,
                jobs: Mutex::new(Vec::new()),
                grace: Mutex::new(Duration::from_secs(30)),
            }),
        }
    }
}

impl Scheduler {
    /// The longest a job name may be, in bytes.
    pub const MAX_JOB_NAME_LEN: usize = 256;

    /// The group's name.
    pub fn group(&self) -> &str {
        &self.inner.group
    }

    fn registered(&self) -> Vec<Arc<Job>> {
        self.inner
            .jobs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// How long [`Scheduler::run_until`] lets the runs going on finish when it is told to stop
    /// (default 30 s); runs still going on then are handed back, and another node retries
    /// them at once.
    pub fn shutdown_grace(&self, grace: Duration) -> &Scheduler {
        *self.inner.grace.lock().unwrap_or_else(|e| e.into_inner()) = grace;
        self
    }

    /// Registers job `name` on `schedule`, run by `handler` with `options`. Every node of the
    /// group registers the same jobs (a node with another schedule for a job replaces it for
    /// all: the last registration wins). The handler's error is recorded as the run's
    /// outcome (`failed: <error>`); a failed run is not retried.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for an empty or over-long name, or a name registered already
    /// on this scheduler.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(client: latchkey_redis::Client) -> latchkey_redis::Result<()> {
    /// use latchkey_redis::{JobOptions, Missed, Run, Schedule};
    ///
    /// let scheduler = client.scheduler("billing");
    /// scheduler.job(
    ///     "invoices",
    ///     Schedule::cron("0 */15 * * * *")?,
    ///     JobOptions::new().missed(Missed::Skip),
    ///     |run: Run| async move { Ok::<(), String>(()) },
    /// )?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn job<F, Fut, E>(
        &self,
        name: impl Into<String>,
        schedule: Schedule,
        options: JobOptions,
        handler: F,
    ) -> Result<&Scheduler>
    where
        F: Fn(Run) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = std::result::Result<(), E>> + Send + 'static,
        E: fmt::Display,
    {
        let name = name.into();
        check_name(&self.inner.group)?;
        if name.is_empty()
            || name.len() > Scheduler::MAX_JOB_NAME_LEN
            || name.chars().any(char::is_control)
        {
            return Err(Error::invalid(
                "job name",
                format!(
                    "{name:?} must be 1 to {} bytes without control characters",
                    Scheduler::MAX_JOB_NAME_LEN
                ),
            ));
        }
        let mut jobs = self.inner.jobs.lock().unwrap_or_else(|e| e.into_inner());
        if jobs.iter().any(|j| *j.name == *name) {
            return Err(Error::invalid(
                "job name",
                format!("`{name}` is registered already; give each job its own name"),
            ));
        }
        let handler: Arc<Handler> = Arc::new(move |run| {
            let fut = handler(run);
            Box::pin(async move { fut.await.map_err(|e| e.to_string()) })
        });
        let job_key = format!("{}:{name}", prefix_name("latchkey_job", &self.inner.object));
        let run_key = format!(
            "{}:{name}",
            prefix_name("latchkey_job_run", &self.inner.object)
        );
        jobs.push(Arc::new(Job {
            name: Arc::from(name),
            schedule,
            options,
            handler,
            keys: JobKeys {
                job: job_key,
                run: Arc::from(run_key),
            },
        }));
        drop(jobs);
        Ok(self)
    }

    /// Registers job `name`, run every `interval` (see [`Schedule::every`]) with the default
    /// [`JobOptions`].
    ///
    /// # Errors
    ///
    /// As [`Schedule::every`] and [`Scheduler::job`].
    pub fn every<F, Fut, E>(
        &self,
        name: impl Into<String>,
        interval: Duration,
        handler: F,
    ) -> Result<&Scheduler>
    where
        F: Fn(Run) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = std::result::Result<(), E>> + Send + 'static,
        E: fmt::Display,
    {
        self.job(name, Schedule::every(interval)?, JobOptions::new(), handler)
    }

    /// Registers job `name`, run on the cron schedule `expression` in UTC (see
    /// [`Schedule::cron`]) with the default [`JobOptions`].
    ///
    /// # Errors
    ///
    /// As [`Schedule::cron`] and [`Scheduler::job`].
    pub fn cron<F, Fut, E>(
        &self,
        name: impl Into<String>,
        expression: &str,
        handler: F,
    ) -> Result<&Scheduler>
    where
        F: Fn(Run) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = std::result::Result<(), E>> + Send + 'static,
        E: fmt::Display,
    {
        self.job(
            name,
            Schedule::cron(expression)?,
            JobOptions::new(),
            handler,
        )
    }

    /// Drives the registered jobs until the future is dropped: see
    /// [`Scheduler::run_until`], with no way to stop gracefully.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future drops the runs going on; their occurrences are handed back, and
    /// another node retries them at once.
    ///
    /// # Errors
    ///
    /// As [`Scheduler::run_until`].
    pub async fn run(&self) -> Result<()> {
        self.run_until(std::future::pending()).await
    }

    /// Drives the registered jobs until `shutdown` completes: registers them, sleeps until
    /// the next time one needs a node (or the group's channel says something changed), claims
    /// the occurrences due and runs them, each in a task of its own. When `shutdown`
    /// completes it claims nothing more, lets the runs going on finish for the
    /// [grace](Scheduler::shutdown_grace), then stops those still going and waits (at most
    /// 5 s) until they have handed their occurrences back. Redis errors are retried (a node
    /// rides out a failover); only bad input and ACL refusals end it.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future drops the runs going on; their occurrences are handed back, and
    /// another node retries them at once.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] when no job is registered or the group's name is bad;
    /// [`Error::WrongType`] when a key of the group holds something else; a refusal of the
    /// server's ACL ([`Error::is_permission_denied`]).
    pub async fn run_until(&self, shutdown: impl Future<Output = ()>) -> Result<()> {
        let jobs = self.registered();
        check_name(&self.inner.group)?;
        if jobs.is_empty() {
            return Err(Error::invalid(
                "scheduler",
                format!(
                    "no job is registered in group `{}`; register jobs before running it",
                    self.inner.group
                ),
            ));
        }
        let mut node = Node {
            scheduler: self,
            clock: None,
            state: jobs
                .iter()
                .map(|job| {
                    (
                        job.name.clone(),
                        JobState {
                            job: job.clone(),
                            next_due: None,
                            action: 0,
                            foreign: false,
                        },
                    )
                })
                .collect(),
            runs: JoinSet::new(),
            stop: tokio::sync::watch::channel(false).0,
        };
        let mut shutdown = std::pin::pin!(shutdown);
        let hub = &self.inner.client.inner.hub;
        let subscription = loop {
            match hub
                .subscribe(&self.inner.channel, WakePolicy::All, None)
                .await
            {
                Ok(subscription) => break subscription,
                Err(e) if fatal(&e) => return Err(e),
                Err(e) => {
                    tracing::debug!(error = %e.chain(), "latchkey scheduler could not subscribe");
                    tokio::select! {
                        _ = &mut shutdown => return Ok(()),
                        _ = tokio::time::sleep(BACKOFF) => {}
                    }
                }
            }
        };
        let mut refresh = true;
        loop {
            if refresh {
                match node.refresh().await {
                    Ok(()) => refresh = false,
                    Err(e) if fatal(&e) => return Err(e),
                    Err(e) => tracing::debug!(error = %e.chain(), "latchkey scheduler read failed"),
                }
            }
            if !refresh {
                if let Err(e) = node.claim_due().await {
                    if fatal(&e) {
                        return Err(e);
                    }
                    tracing::debug!(error = %e.chain(), "latchkey scheduler claim failed");
                    refresh = true;
                }
            }
            let deadline = if refresh {
                Instant::now() + BACKOFF
            } else {
                node.wake_at()
            };
            tokio::select! {
                biased;
                _ = &mut shutdown => break,
                woken = subscription.wait_until(deadline) => {
                    if woken {
                        refresh = true;
                    }
                }
                Some(_) = node.runs.join_next(), if !node.runs.is_empty() => {}
            }
        }
        drop(subscription);
        let grace = *self.inner.grace.lock().unwrap_or_else(|e| e.into_inner());
        let mut runs = std::mem::take(&mut node.runs);
        let _ =
            tokio::time::timeout(grace, async { while runs.join_next().await.is_some() {} }).await;
        // The runs still going on are stopped and hand their occurrences back, so that
        // another node retries them at once; waited for here, so that the hand-backs are sent
        // before the caller's runtime ends.
        let _ = node.stop.send(true);
        let _ = tokio::time::timeout(HAND_BACK, async {
            while runs.join_next().await.is_some() {}
        })
        .await;
        runs.shutdown().await;
        Ok(())
    }

    /// Reads the state of the group's jobs from Redis: every job some node registered (not
    /// only this scheduler's), with its schedule, next occurrence, the run going on and the
    /// last one, for tools and dashboards.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: reads.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a bad group name, [`Error::WrongType`], connection errors.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(client: latchkey_redis::Client) -> latchkey_redis::Result<()> {
    /// for job in client.scheduler("billing").jobs().await? {
    ///     println!("{} ({}): next {:?}, last {:?}", job.name, job.schedule, job.next_due, job.last);
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn jobs(&self) -> Result<Vec<JobInfo>> {
        check_name(&self.inner.group)?;
        let conn = &self.inner.client.inner.conn;
        let names: Vec<String> = conn
            .query(
                redis::cmd("ZRANGE").arg(&*self.inner.index).arg(0).arg(-1),
                "reading a job group",
                &self.inner.group,
            )
            .await?;
        let mut out = Vec::with_capacity(names.len());
        for name in names {
            let key = format!("{}:{name}", prefix_name("latchkey_job", &self.inner.object));
            let fields: HashMap<String, String> = conn
                .query(
                    redis::cmd("HGETALL").arg(&key),
                    "reading a job",
                    &self.inner.group,
                )
                .await?;
            out.push(job_info(name, &fields));
        }
        Ok(out)
    }
}

/// A time in Unix ms as a `SystemTime`.
fn system_time(ms: i64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(ms.max(0) as u64)
}

fn job_info(name: String, fields: &HashMap<String, String>) -> JobInfo {
    let int = |field: &str| fields.get(field).and_then(|v| v.parse::<i64>().ok());
    let run = |prefix: &str, finished: bool| {
        let get = |field: &str| int(&format!("{prefix}_{field}"));
        Some(JobRun {
            owner: fields.get(&format!("{prefix}_owner"))?.clone(),
            token: FencingToken::new(get("token")? as u64),
            due: system_time(get("due")?),
            started: system_time(get("started").unwrap_or(0)),
            finished: if finished {
                get("finished").map(system_time)
            } else {
                None
            },
            outcome: if finished {
                fields.get(&format!("{prefix}_outcome")).cloned()
            } else {
                None
            },
            attempt: get("attempt").unwrap_or(1) as u32,
        })
    };
    JobInfo {
        schedule: fields.get("spec").cloned().unwrap_or_default(),
        next_due: int("next_due").map(system_time),
        running: run("run", false),
        last: run("last", true),
        skipped: int("skipped").unwrap_or(0) as u64,
        name,
    }
}

/// The server's clock as the last reply told it.
#[derive(Clone, Copy)]
struct ServerClock {
    at: Instant,
    ms: i64,
}

impl ServerClock {
    fn now_ms(&self) -> i64 {
        self.ms + self.at.elapsed().as_millis() as i64
    }

    /// When the server's clock shows `ms`, on this node's monotonic clock.
    fn instant_of(&self, ms: i64) -> Instant {
        let ahead = ms - self.ms;
        if ahead <= 0 {
            self.at
        } else {
            self.at + Duration::from_millis(ahead as u64)
        }
    }
}

/// One job's state on this node.
struct JobState {
    job: Arc<Job>,
    /// Its next occurrence as last seen (`None`: ask).
    next_due: Option<i64>,
    /// When it needs a node next (server ms), from the group's index.
    action: i64,
    /// Registered by another node with another schedule: this node leaves it alone.
    foreign: bool,
}

/// One node of a group, in [`Scheduler::run_until`].
struct Node<'a> {
    scheduler: &'a Scheduler,
    clock: Option<ServerClock>,
    state: HashMap<Arc<str>, JobState>,
    runs: JoinSet<()>,
    /// Tells the runs going on to stop and hand their occurrences back.
    stop: tokio::sync::watch::Sender<bool>,
}

/// What one claim call answered.
enum Claimed {
    Run(GuardCore<JobHold>),
    Wait {
        ms: i64,
        now: i64,
    },
    Retry {
        due: i64,
        attempts: u32,
        now: i64,
    },
    Moved {
        next_due: i64,
        now: i64,
    },
    Unregistered,
    /// The job is registered with another schedule (another node's, registered last).
    Foreign {
        now: i64,
    },
}

impl Node<'_> {
    fn inner(&self) -> &SchedulerInner {
        &self.scheduler.inner
    }

    fn observe(&mut self, now_ms: i64) {
        self.clock = Some(ServerClock {
            at: Instant::now(),
            ms: now_ms,
        });
    }

    /// Registers the jobs that need it and reads the group's index.
    async fn refresh(&mut self) -> Result<()> {
        let conn = &self.scheduler.inner.client.inner.conn;
        if self.clock.is_none() {
            let (s, us): (i64, i64) = conn
                .query(&redis::cmd("TIME"), "reading the server's clock", "")
                .await?;
            self.observe(s * 1000 + us / 1000);
        }
        let names: Vec<Arc<str>> = self
            .state
            .iter()
            .filter(|(_, s)| s.next_due.is_none())
            .map(|(n, _)| n.clone())
            .collect();
        for name in names {
            self.register(&name).await?;
        }
        let index: Vec<(String, f64)> = conn
            .query(
                redis::cmd("ZRANGE")
                    .arg(&*self.inner().index)
                    .arg(0)
                    .arg(-1)
                    .arg("WITHSCORES"),
                "reading a job group",
                &self.inner().group,
            )
            .await?;
        let index: HashMap<String, f64> = index.into_iter().collect();
        for (name, state) in &mut self.state {
            match index.get(&**name) {
                Some(_) if state.foreign => {}
                Some(action) => state.action = *action as i64,
                // Gone from the index (the group's keys expired): registered again at once.
                None => {
                    state.next_due = None;
                    state.action = 0;
                    state.foreign = false;
                }
            }
        }
        Ok(())
    }

    async fn register(&mut self, name: &str) -> Result<()> {
        let clock = self.clock.expect("the clock is read first");
        let state = &self.state[name];
        let job = state.job.clone();
        let first = job
            .schedule
            .next_after(clock.now_ms())
            .ok_or_else(|| no_occurrence(&job))?;
        let mut invocation = scripts::SCHED_REGISTER.invocation();
        invocation
            .key(&job.keys.job)
            .key(&*job.keys.run)
            .key(&*self.inner().index)
            .arg(&*job.name)
            .arg(job.schedule.to_string())
            .arg(first)
            .arg(IDLE.as_millis() as u64);
        let (next_due, now): (i64, i64) = self
            .inner()
            .client
            .inner
            .conn
            .script(&invocation, "registering a job", &self.inner().group)
            .await?;
        self.observe(now);
        if let Some(state) = self.state.get_mut(name) {
            state.next_due = Some(next_due);
            state.action = next_due;
            state.foreign = false;
        }
        Ok(())
    }

    /// When this node must wake next: the earliest action of its jobs, with a little jitter so
    /// that the nodes of a group do not all call at once.
    fn wake_at(&self) -> Instant {
        let Some(clock) = self.clock else {
            return Instant::now();
        };
        let earliest = self
            .state
            .values()
            .map(|s| s.action)
            .min()
            .unwrap_or(i64::MAX);
        if earliest == i64::MAX {
            return Instant::now() + Duration::from_secs(3600);
        }
        let jitter = Duration::from_micros(rand::random::<u64>() % 20_000);
        clock.instant_of(earliest) + jitter
    }

    /// Claims and starts the occurrences due now.
    async fn claim_due(&mut self) -> Result<()> {
        let Some(clock) = self.clock else {
            return Ok(());
        };
        let mut due: Vec<Arc<str>> = self
            .state
            .iter()
            .filter(|(_, s)| s.action <= clock.now_ms())
            .map(|(n, _)| n.clone())
            .collect();
        // In an order of this node's own: the nodes of a group claim different jobs first,
        // rather than all racing for the same one.
        due.shuffle(&mut rand::rng());
        for name in due {
            self.claim_job(&name).await?;
        }
        Ok(())
    }

    /// Claims what job `name` has due, following the answers (a retry first, a next
    /// occurrence moved on by another node) until there is nothing to do for now.
    async fn claim_job(&mut self, name: &str) -> Result<()> {
        let mut retry: Option<(i64, u32)> = None;
        for _ in 0..8 {
            let now = self.clock.map_or(0, |c| c.now_ms());
            let state = &self.state[name];
            let job = state.job.clone();
            let Some(next_due) = state.next_due else {
                self.register(name).await?;
                continue;
            };
            let plan = match retry {
                Some((due, attempts)) => Plan {
                    mode: "retry",
                    expected: due,
                    next: next_due,
                    run: due,
                    skipped: 0,
                    attempt: attempts + 1,
                    queue: false,
                    as_of: 0,
                },
                None => plan(&job, next_due, now)?,
            };
            match self.claim(&job, &plan).await? {
                Claimed::Run(core) => {
                    if plan.mode != "retry" {
                        self.set(name, Some(plan.next), plan.next);
                    }
                    self.start(job, core, plan.run, plan.attempt);
                    return Ok(());
                }
                Claimed::Wait { ms, now } => {
                    self.observe(now);
                    self.set(name, None, now + ms);
                    return Ok(());
                }
                Claimed::Retry { due, attempts, now } => {
                    self.observe(now);
                    retry = Some((due, attempts));
                }
                Claimed::Moved { next_due, now } => {
                    self.observe(now);
                    retry = None;
                    self.set(name, Some(next_due), next_due);
                    if next_due > now {
                        return Ok(());
                    }
                }
                Claimed::Unregistered => {
                    if let Some(state) = self.state.get_mut(name) {
                        state.next_due = None;
                    }
                }
                Claimed::Foreign { now } => {
                    self.observe(now);
                    if let Some(state) = self.state.get_mut(name) {
                        if !state.foreign {
                            tracing::warn!(
                                group = %self.scheduler.inner.group,
                                job = %job.name,
                                schedule = %job.schedule,
                                "latchkey: another node registered this job with another \
                                 schedule after this one; this node runs none of its \
                                 occurrences until it registers it again (restart)"
                            );
                        }
                        state.foreign = true;
                        state.action = i64::MAX;
                    }
                    return Ok(());
                }
            }
        }
        Ok(())
    }

    fn set(&mut self, name: &str, next_due: Option<i64>, action: i64) {
        if let Some(state) = self.state.get_mut(name) {
            if next_due.is_some() {
                state.next_due = next_due;
            }
            state.action = action;
        }
    }

    /// One claim script call.
    async fn claim(&self, job: &Arc<Job>, plan: &Plan) -> Result<Claimed> {
        let inner = self.inner();
        let hold = JobHold {
            inner: Arc::new(JobHoldInner {
                client: inner.client.clone(),
                name: job.name.clone(),
                job_key: job.keys.job.clone(),
                run: job.keys.run.clone(),
                index: inner.index.clone(),
                channel: inner.channel.clone(),
            }),
            outcome: Arc::new(Mutex::new(None)),
        };
        let claim = Claim::new(&hold);
        let keys = [
            job.keys.job.as_str(),
            &*job.keys.run,
            &*inner.index,
            &*inner.channel,
        ];
        let mut other = None;
        let args = |lease_ms: u64| {
            vec![
                lease_ms.to_string(),
                claim.field().to_string(),
                job.name.to_string(),
                plan.mode.to_owned(),
                plan.expected.to_string(),
                plan.next.to_string(),
                plan.run.to_string(),
                plan.skipped.to_string(),
                match (plan.queue, job.options.overlap) {
                    (false, Overlap::Skip) => "skip",
                    _ => "queue",
                }
                .to_owned(),
                (IDLE.as_millis() as u64).to_string(),
                inner.client.inner.conn.publish_command().to_owned(),
                job.schedule.to_string(),
                plan.as_of.to_string(),
            ]
        };
        let attempt = attempt_hold(
            &claim,
            Lease::Watchdog,
            AcquireCall {
                script: &scripts::SCHED_CLAIM,
                keys: &keys,
                args: &[],
                context: "claiming a job",
                name: &inner.group,
            },
            args,
            |core| core,
            |reply| {
                other = Some(reply.to_vec());
                Ok(Attempt::Wait {
                    retry_after: None,
                    short: false,
                })
            },
        )
        .await?;
        match (attempt, other.as_deref()) {
            (Attempt::Granted(core), _) => Ok(Claimed::Run(core)),
            (Attempt::Stalled(e), _) => Err(e),
            (_, Some(&[0, ms, now])) => Ok(Claimed::Wait { ms, now }),
            (_, Some(&[2, due, attempts, now])) => Ok(Claimed::Retry {
                due,
                attempts: attempts as u32,
                now,
            }),
            (_, Some(&[3 | 4, next_due, now])) => Ok(Claimed::Moved { next_due, now }),
            (_, Some(&[-1])) => Ok(Claimed::Unregistered),
            (_, Some(&[5, now])) => Ok(Claimed::Foreign { now }),
            (_, reply) => Err(unexpected("the job claim script", reply)),
        }
    }

    /// Runs a claimed occurrence in a task of its own.
    fn start(&mut self, job: Arc<Job>, core: GuardCore<JobHold>, due: i64, attempt: u32) {
        let client = &self.inner().client;
        let site = Site::new(client, "job", &job.name);
        if let Some(clock) = self.clock {
            let late = (clock.now_ms() - due).max(0) as u64;
            site.observe(metrics::JOB_LATENESS, &[], Duration::from_millis(late));
        }
        let run = Run {
            job: job.name.clone(),
            due: system_time(due),
            attempt,
            claim: core.reenter(),
        };
        let span = tracing::info_span!(
            "job",
            group = %self.inner().group,
            job = %job.name,
            token = core.fencing_token().get(),
            attempt
        );
        let mut stop = self.stop.subscribe();
        let task = async move {
            let started = Instant::now();
            let work = AssertUnwindSafe((job.handler)(run)).catch_unwind();
            let limited = async {
                match job.options.max_runtime {
                    Some(limit) => tokio::time::timeout(limit, work).await.ok(),
                    None => Some(work.await),
                }
            };
            let (label, outcome) = tokio::select! {
                _ = core.lost() => ("lost", None),
                _ = stop.wait_for(|stop| *stop) => {
                    ("handed_back", Some("handed back".to_owned()))
                }
                result = limited => match result {
                    Some(Ok(Ok(()))) => ("ok", Some("ok".to_owned())),
                    Some(Ok(Err(e))) => ("failed", Some(format!("failed: {e}"))),
                    Some(Err(_)) => ("panicked", Some("panicked".to_owned())),
                    None => ("timed_out", Some("timed out".to_owned())),
                },
            };
            site.count(metrics::JOB_RUNS, &[("outcome", label)], 1);
            site.observe(
                metrics::JOB_DURATION,
                &[("outcome", label)],
                started.elapsed(),
            );
            if let Some(outcome) = outcome {
                *core
                    .held()
                    .outcome
                    .lock()
                    .unwrap_or_else(|e| e.into_inner()) = Some(outcome);
                finish(core).await;
            }
        };
        self.runs.spawn(tracing::Instrument::instrument(task, span));
    }
}

/// Records a run's outcome (see scripts/sched_finish.lua), trying again through connection
/// errors for as long as the claim lasts: a run whose end is not recorded would be retried by
/// another node once its lease runs out. The claim is renewed meanwhile.
async fn finish(core: GuardCore<JobHold>) {
    let task = core.held().release_task(core.field());
    let conn = &core.held().inner.client.inner.conn;
    let mut answer_lost = false;
    for attempt in 0..20 {
        match task.run::<i64>(conn, &core.held().inner.name).await {
            Ok(0) => break,
            // Not the owner's any more: another node retried it, or an earlier try whose
            // answer was lost ended it.
            Ok(_) => {
                if !answer_lost {
                    tracing::warn!(job = %core.held().inner.name, "latchkey: a job's run was lost before its end was recorded");
                }
                break;
            }
            Err(e) if (e.is_connection() || e.is_timeout()) && !core.is_lost() && attempt < 19 => {
                answer_lost |= e.is_uncertain();
                tokio::time::sleep(Duration::from_millis(100 << attempt.min(4))).await;
            }
            Err(e) => {
                tracing::warn!(error = %e.chain(), "latchkey could not record a job's run");
                break;
            }
        }
    }
    core.forget();
}

fn no_occurrence(job: &Job) -> Error {
    Error::invalid(
        "schedule",
        format!(
            "{} of job `{}` has no next occurrence",
            job.schedule, job.name
        ),
    )
}

/// What one claim call asks for.
struct Plan {
    mode: &'static str,
    /// The job's next_due (claim, skip) or the unfinished run's occurrence (retry).
    expected: i64,
    /// The job's next_due afterwards.
    next: i64,
    /// The occurrence to run.
    run: i64,
    /// Occurrences passed over.
    skipped: u32,
    attempt: u32,
    /// Wait for a run going on whatever the job's [`Overlap`]: a catch-up of
    /// [`Missed::RunEach`], whose runs follow each other.
    queue: bool,
    /// The server's clock as this node reckoned it for the plan (ms): the script sends the
    /// node back to plan again when the server's clock is behind it.
    as_of: i64,
}

/// What to ask for job `job` whose next occurrence is `next_due`, at server time `now`: the
/// occurrence due, or, when some were missed (the one after next_due is due too), what the
/// job's [`Missed`] policy says.
fn plan(job: &Job, next_due: i64, now: i64) -> Result<Plan> {
    let after = |t: i64| job.schedule.next_after(t).ok_or_else(|| no_occurrence(job));
    // The missed ones to run and the current one.
    let keep = match job.options.missed {
        Missed::RunEach { max } => max.max(1) as usize + 1,
        _ => 1,
    };
    // How many occurrences are due (next_due and the ones after it up to `now`), and the last
    // `keep` of them, oldest first.
    let (count, latest) = match &job.schedule.0 {
        ScheduleKind::Every(p) => {
            let p = *p as i64;
            let count = if now < next_due {
                1
            } else {
                (now - next_due) / p + 1
            };
            let last = next_due + (count - 1) * p;
            let kept = count.min(keep as i64);
            let latest: Vec<i64> = (0..kept).rev().map(|i| last - i * p).collect();
            (count as u64, latest)
        }
        ScheduleKind::Cron(_) => {
            let (mut count, mut latest) = (1u64, std::collections::VecDeque::from([next_due]));
            let mut at = next_due;
            // A cron schedule is walked (at most a day of per-second occurrences).
            while count < 86_400 {
                let next = after(at)?;
                if next > now {
                    break;
                }
                count += 1;
                latest.push_back(next);
                if latest.len() > keep {
                    latest.pop_front();
                }
                at = next;
            }
            (count, latest.into())
        }
    };
    let last = *latest.last().expect("at least next_due");
    let one = |mode, run, next, skipped: u64| Plan {
        mode,
        expected: next_due,
        next,
        run,
        skipped: skipped.min(u64::from(u32::MAX)) as u32,
        attempt: 1,
        queue: false,
        as_of: now,
    };
    if count == 1 {
        return Ok(one("claim", next_due, after(next_due)?, 0));
    }
    let future = after(now.max(last))?;
    Ok(match job.options.missed {
        Missed::Skip => one("skip", next_due, future, count),
        Missed::RunOnce => one("claim", last, future, count - 1),
        Missed::RunEach { .. } => {
            let first = latest[0];
            Plan {
                queue: true,
                ..one("claim", first, after(first)?, count - latest.len() as u64)
            }
        }
    })
}

/// A claimed run, kept like a lock's hold (the run hash, the owner's field, renewed by the
/// watchdog); its release records the outcome.
#[derive(Clone)]
pub(crate) struct JobHold {
    inner: Arc<JobHoldInner>,
    /// The outcome to record; `None` when the run ends without one (dropped): handed back.
    outcome: Arc<Mutex<Option<String>>>,
}

struct JobHoldInner {
    client: Client,
    name: Arc<str>,
    job_key: String,
    run: Arc<str>,
    index: Arc<str>,
    channel: Arc<str>,
}

crate::client::object!(JobHold);

impl Holds for JobHold {
    const KIND: &'static str = "job";

    fn key(&self) -> &Arc<str> {
        &self.inner.run
    }

    fn release_task(&self, field: &str) -> Task {
        let inner = &self.inner;
        let outcome = self
            .outcome
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
            .unwrap_or_else(|| "handed back".to_owned());
        Task::new(
            &scripts::SCHED_FINISH,
            vec![
                Arc::from(inner.job_key.as_str()),
                inner.run.clone(),
                inner.index.clone(),
                inner.channel.clone(),
            ],
            vec![
                field.to_owned(),
                inner.name.to_string(),
                outcome,
                (IDLE.as_millis() as u64).to_string(),
                inner.client.inner.conn.publish_command().to_owned(),
            ],
            "ending a job's run",
        )
    }
}

#[cfg(test)]
#[path = "scheduler_tests.rs"]
mod tests;
