//! The chaos worker: one OS process that loops acquire → critical section →
//! release on one latchkey lock and records every step.
//!
//! The `chaos-worker` binary runs [`run`] with a [`WorkerConfig`] given as its
//! only argument (JSON). The harness ([`crate::harness`]) starts several of
//! them; each one
//!
//! 1. connects a latchkey [`Client`] (to the lock server, or to a fault proxy
//!    in front of it) and a plain connection to the fencing store;
//! 2. makes one [`latchkey_redis::Lock`] handle; its client's id (which every owner
//!    id of its acquires starts with) is the `process` of every event it
//!    records, and it writes that id to its owner file (see
//!    [`owner_file`]) so that the harness can tell which process holds the
//!    lock;
//! 3. loops: `AcquireInvoke` → `lock_with` → `AcquireOk`/`AcquireFail`/
//!    `AcquireUnknown`; in the critical section [`WorkerConfig::writes_per_hold`]
//!    fenced writes to the store carrying the fencing token, separated by
//!    [`WorkerConfig::write_interval_ms`]; `LostSignal` when the library says
//!    the hold is lost; `ReleaseInvoke` → `unlock` → `ReleaseOk`/`ReleaseFail`;
//! 4. stops by itself after [`WorkerConfig::max_acquires`] successful
//!    acquisitions, [`WorkerConfig::max_attempts`] attempts, at its deadline,
//!    or when the harness creates the stop file (see [`stop_file`]), and
//!    writes a [`WorkerSummary`].
//!
//! A [`Primitive::Job`] worker runs a scheduler instead of step 3: every run
//! of its job is a hold, recorded and written in the same way (see the
//! `job` module).
//!
//! Everything is recorded with [`HistoryWriter`] on `CLOCK_MONOTONIC`, the
//! clock all processes share.

use std::error::Error as StdError;
use std::path::{Path, PathBuf};
use std::time::Duration;

use latchkey_redis::{
    Client, Election, FairLock, FairLockGuard, Leadership, LockGuard, LockOptions, RedLock,
    RedLockGuard, WriteGuard, WriteLock,
};
use serde::{Deserialize, Serialize};

use crate::history::{EventKind, HistoryWriter};
use crate::store::FENCED_WRITE_LUA;

mod job;

pub use job::{job_due_of, job_write_value};

/// Which latchkey primitive the workers of a run contend for (on
/// [`WorkerConfig::lock_url`]; [`WorkerConfig::redlock_urls`] overrides it).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Primitive {
    /// [`latchkey_redis::Lock`], the reentrant lock.
    #[default]
    Lock,
    /// [`latchkey_redis::FairLock`]: one wait queue in Redis, served in arrival order.
    FairLock,
    /// The write side of a [`latchkey_redis::RwLock`] (writers exclude each other).
    WriteLock,
    /// A [`latchkey_redis::Election`]: a hold is a leadership, its fencing token the term, its
    /// release a resignation (always the watchdog lease: [`WorkerConfig::lease_ms`] is not
    /// used).
    Election,
    /// A job of a [`latchkey_redis::Scheduler`] (group [`WorkerConfig::lock_name`], job
    /// [`JOB_NAME`], every [`WorkerConfig::job_interval_ms`]): a hold is one run of an
    /// occurrence, its fencing token the run's, its release the handler's return (always the
    /// watchdog lease). The worker runs the scheduler instead of acquire rounds; see
    /// [`job_write_value`] for what its writes carry.
    Job,
}

/// The name of the one job a [`Primitive::Job`] worker registers.
pub const JOB_NAME: &str = "job";

/// Everything a worker process needs; passed as JSON in its only argument.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerConfig {
    /// The worker slot (stable across restarts of the slot's process).
    pub worker: u32,
    /// The run directory: history files, owner files, summaries, stop file.
    pub dir: PathBuf,
    /// URL of the lock server (or of a proxy in front of it).
    pub lock_url: String,
    /// URL of the fencing store (a separate server, never faulted).
    pub store_url: String,
    /// Name of the lock all workers contend for.
    pub lock_name: String,
    /// What kind of lock that is.
    pub primitive: Primitive,
    /// The fair lock's waiter timeout (`None`: the library's default).
    pub waiter_timeout_ms: Option<u64>,
    /// Key of the fencing store's hash.
    pub store_key: String,
    /// The client's watchdog timeout (the lease of locks taken without one).
    pub watchdog_timeout_ms: u64,
    /// The client's command timeout.
    pub command_timeout_ms: u64,
    /// A fixed lease (no watchdog) instead of the watchdog lease.
    pub lease_ms: Option<u64>,
    /// How long one acquire waits for the lock before giving up.
    pub acquire_wait_ms: u64,
    /// Fenced writes per critical section.
    pub writes_per_hold: u32,
    /// Pause between two writes of one critical section.
    pub write_interval_ms: u64,
    /// Longest pause between two critical sections (the actual pause varies
    /// from 0 to this).
    pub think_ms: u64,
    /// Whether the worker checks [`LockGuard::is_lost`] and listens to
    /// [`LockGuard::lost`] *before* each write, as the README tells users to
    /// (`true`), or only after a write (`false`). A worker paused between
    /// deciding to write and writing (the GC-pause case) behaves like the
    /// second kind: its late write is what the fencing store must refuse.
    pub check_lost_before_write: bool,
    /// After the store refused a write as stale, how long to wait for
    /// [`LockGuard::lost`] before giving up on it.
    pub lost_wait_ms: u64,
    /// Use a [`RedLock`] over these servers (an odd number, at least 3)
    /// instead of a [`latchkey_redis::Lock`] on [`WorkerConfig::lock_url`].
    pub redlock_urls: Vec<String>,
    /// The RedLock's per-node timeout.
    pub redlock_node_timeout_ms: u64,
    /// Stop after this many successful acquisitions.
    pub max_acquires: u64,
    /// Stop after this many acquisition attempts.
    pub max_attempts: u64,
    /// Stop this long after starting, whatever happens.
    pub run_for_ms: u64,
    /// The job's interval ([`Primitive::Job`]).
    pub job_interval_ms: u64,
}

impl WorkerConfig {
    /// A configuration with the suite's defaults for `worker`; the harness
    /// fills in URLs and names.
    pub fn new(worker: u32, dir: impl Into<PathBuf>) -> WorkerConfig {
        WorkerConfig {
            worker,
            dir: dir.into(),
            lock_url: String::new(),
            store_url: String::new(),
            lock_name: "chaos".into(),
            primitive: Primitive::Lock,
            waiter_timeout_ms: None,
            store_key: "chaos:store".into(),
            watchdog_timeout_ms: 3000,
            command_timeout_ms: 1000,
            lease_ms: None,
            acquire_wait_ms: 3000,
            writes_per_hold: 2,
            write_interval_ms: 10,
            think_ms: 10,
            check_lost_before_write: true,
            lost_wait_ms: 10_000,
            redlock_urls: Vec::new(),
            redlock_node_timeout_ms: 200,
            max_acquires: 1_000,
            max_attempts: 100_000,
            run_for_ms: 120_000,
            job_interval_ms: 1000,
        }
    }
}

/// What a worker reports when it stops, in its summary file (see
/// [`summary_file`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerSummary {
    /// Acquisition attempts.
    pub attempts: u64,
    /// Successful acquisitions.
    pub acquired: u64,
    /// Holds the library reported lost.
    pub lost: u64,
    /// Writes the fencing store refused.
    pub rejected_writes: u64,
    /// Stale holds (a write was refused) for which `lost()` did not fire
    /// within [`WorkerConfig::lost_wait_ms`].
    pub lost_not_signalled: u64,
    /// Owner ids this process used (one lock handle per process).
    pub owners: Vec<String>,
    /// Pub/sub channels the client was still subscribed to when it stopped
    /// (after the linger time).
    pub subscriptions_at_exit: usize,
    /// Holds the client's watchdog still tracked when it stopped.
    pub tracked_locks_at_exit: usize,
    /// Why the worker stopped.
    pub stopped_because: String,
}

/// The file a worker writes its current owner id to (one line, replaced
/// when it changes).
pub fn owner_file(dir: &Path, worker: u32) -> PathBuf {
    dir.join(format!("worker-{worker:05}.owner"))
}

/// The file a worker writes its [`WorkerSummary`] to when it stops.
pub fn summary_file(dir: &Path, worker: u32) -> PathBuf {
    dir.join(format!("worker-{worker:05}.summary.json"))
}

/// The file whose existence tells every worker of a run to stop after its
/// current critical section.
pub fn stop_file(dir: &Path) -> PathBuf {
    dir.join("stop")
}

/// A boxed error for the worker's fatal failures.
pub type BoxError = Box<dyn StdError + Send + Sync>;

/// A connection to the fencing store that runs [`FENCED_WRITE_LUA`].
#[derive(Clone)]
pub struct StoreClient {
    conn: redis::aio::MultiplexedConnection,
    script: std::sync::Arc<redis::Script>,
    key: String,
}

impl std::fmt::Debug for StoreClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreClient")
            .field("key", &self.key)
            .finish_non_exhaustive()
    }
}

impl StoreClient {
    /// Connects to the store at `url`, writing to the hash `key`.
    ///
    /// # Errors
    ///
    /// If the URL is unusable or the server cannot be reached.
    pub async fn connect(url: &str, key: &str) -> redis::RedisResult<StoreClient> {
        let config = redis::AsyncConnectionConfig::new()
            .set_connection_timeout(Some(Duration::from_secs(5)))
            .set_response_timeout(Some(Duration::from_secs(30)));
        let conn = redis::Client::open(url)?
            .get_multiplexed_async_connection_with_config(&config)
            .await?;
        Ok(StoreClient {
            conn,
            script: std::sync::Arc::new(redis::Script::new(FENCED_WRITE_LUA)),
            key: key.to_owned(),
        })
    }

    /// A fenced write: `true` if the store accepted it, `false` if it refused
    /// the token as stale.
    ///
    /// # Errors
    ///
    /// Connection errors and script errors.
    pub async fn write(&mut self, token: u64, value: &str) -> redis::RedisResult<bool> {
        let accepted: i64 = self
            .script
            .key(&self.key)
            .arg(token.to_string())
            .arg(value)
            .invoke_async(&mut self.conn)
            .await?;
        Ok(accepted == 1)
    }
}

/// Makes the kernel kill this process when its parent dies, so that workers
/// never outlive a crashed test. Returns whether it worked.
pub fn die_with_parent() -> bool {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: prctl(PR_SET_PDEATHSIG) only sets a flag of this process.
        let rc = unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) };
        // SAFETY: getppid has no preconditions.
        let orphaned = unsafe { libc::getppid() } == 1;
        rc == 0 && !orphaned
    }
    #[cfg(not(target_os = "linux"))]
    {
        false
    }
}

/// A small deterministic pseudo-random sequence (xorshift), so that think
/// times vary between workers without a dependency.
struct Jitter(u64);

impl Jitter {
    fn next(&mut self, bound: u64) -> u64 {
        if bound == 0 {
            return 0;
        }
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % (bound + 1)
    }
}

/// Writes `text` to `path` atomically (write a temporary file, rename).
fn write_atomically(path: &Path, text: &str) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text)?;
    std::fs::rename(&tmp, path)
}

/// Connects the latchkey client, retrying until `deadline` (the lock server
/// may be down while the worker starts).
async fn connect_client(
    config: &WorkerConfig,
    url: &str,
    deadline: tokio::time::Instant,
) -> Result<Client, BoxError> {
    loop {
        let attempt = Client::builder(url)
            .watchdog_timeout(Duration::from_millis(config.watchdog_timeout_ms))
            .command_timeout(Duration::from_millis(config.command_timeout_ms))
            .connect_timeout(Duration::from_millis(config.command_timeout_ms.max(500)))
            .subscription_linger(Duration::from_millis(200))
            .connect()
            .await;
        match attempt {
            Ok(client) => return Ok(client),
            Err(e) if e.is_connection() && tokio::time::Instant::now() < deadline => {
                eprintln!(
                    "worker {}: connect failed, retrying: {}",
                    config.worker,
                    e.chain()
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// What the worker locks.
enum Backend {
    /// A lock on one server; every acquire is an owner of its own.
    Lock(latchkey_redis::Lock),
    /// A fair lock on one server; every acquire is an owner of its own.
    Fair(FairLock),
    /// The write side of a read-write lock on one server; every acquire is an owner of its
    /// own.
    Write(WriteLock),
    /// A RedLock over several servers; every acquire is a new owner.
    RedLock(RedLock),
    /// A leader election on one server; every campaign is an owner of its own, `value` what
    /// it campaigns
    /// with.
    Election { election: Election, value: String },
}

/// A hold of either backend.
enum Held {
    Lock(LockGuard),
    Fair(FairLockGuard),
    Write(WriteGuard),
    RedLock(RedLockGuard),
    Election(Leadership),
}

impl Held {
    fn token(&self) -> u64 {
        match self {
            Held::Lock(g) => g.fencing_token().get(),
            Held::Fair(g) => g.fencing_token().get(),
            Held::Write(g) => g.fencing_token().get(),
            // Fencing is on (the default), so there always is a token.
            Held::RedLock(g) => g.fencing_token().map_or(0, |t| t.get()),
            Held::Election(g) => g.term(),
        }
    }

    fn is_lost(&self) -> bool {
        match self {
            Held::Lock(g) => g.is_lost(),
            Held::Fair(g) => g.is_lost(),
            Held::Write(g) => g.is_lost(),
            Held::RedLock(g) => g.is_lost(),
            Held::Election(g) => g.is_lost(),
        }
    }

    fn lost(&self) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + 'static>> {
        match self {
            Held::Lock(g) => Box::pin(g.lost()),
            Held::Fair(g) => Box::pin(g.lost()),
            Held::Write(g) => Box::pin(g.lost()),
            Held::RedLock(g) => Box::pin(g.lost()),
            Held::Election(g) => Box::pin(g.lost()),
        }
    }

    async fn unlock(self) -> latchkey_redis::Result<()> {
        match self {
            Held::Lock(g) => g.unlock().await,
            Held::Fair(g) => g.unlock().await,
            Held::Write(g) => g.unlock().await,
            Held::RedLock(g) => g.unlock().await,
            Held::Election(g) => g.resign().await,
        }
    }
}

/// One worker process's state.
struct Worker {
    config: WorkerConfig,
    client: Client,
    backend: Backend,
    history: HistoryWriter,
    store: StoreClient,
    summary: WorkerSummary,
    jitter: Jitter,
}

/// How a critical section ended.
enum Ending {
    /// Every write done (or the worker was told to stop writing): release.
    Done,
    /// The library reported the hold lost.
    Lost,
}

/// Records `owner` (the worker's client id) in the owner file and the
/// summary, and opens the history for it.
fn adopt_handle(
    config: &WorkerConfig,
    owner: String,
    summary: &mut WorkerSummary,
) -> Result<HistoryWriter, BoxError> {
    write_atomically(
        &owner_file(&config.dir, config.worker),
        &format!("{owner}\n"),
    )?;
    summary.owners.push(owner.clone());
    Ok(HistoryWriter::create(&config.dir, config.worker, owner)?)
}

impl Worker {
    fn options(&self) -> LockOptions {
        let mut options =
            LockOptions::new().wait(Duration::from_millis(self.config.acquire_wait_ms));
        if let Some(lease) = self.config.lease_ms {
            options = options.lease(Duration::from_millis(lease));
        }
        options
    }

    /// One acquisition attempt and, if it succeeds, one critical section and
    /// its release.
    async fn round(&mut self) -> Result<(), BoxError> {
        self.summary.attempts += 1;
        let acquire = self.history.invoke(EventKind::AcquireInvoke)?;
        let attempt = match &self.backend {
            Backend::Lock(lock) => lock.lock_with(self.options()).await.map(Held::Lock),
            Backend::Fair(lock) => lock.lock_with(self.options()).await.map(Held::Fair),
            Backend::Write(lock) => lock.lock_with(self.options()).await.map(Held::Write),
            Backend::RedLock(lock) => lock.lock_with(self.options()).await.map(Held::RedLock),
            Backend::Election { election, value } => {
                let wait = Duration::from_millis(self.config.acquire_wait_ms);
                match election.try_campaign(value.as_str(), wait).await {
                    Ok(Some(leadership)) => Ok(Held::Election(leadership)),
                    Ok(None) => {
                        // As a lock's `lock_with` whose wait ran out.
                        self.history.record(
                            acquire.op,
                            EventKind::AcquireFail {
                                reason: format!("did not lead within {wait:?}"),
                            },
                        )?;
                        return Ok(());
                    }
                    Err(e) => Err(e),
                }
            }
        };
        let guard = match attempt {
            Ok(guard) => guard,
            Err(e) if e.is_connection() => {
                eprintln!(
                    "worker {}: acquire outcome unknown: {}",
                    self.config.worker,
                    e.chain()
                );
                // Timed out or the connection broke after the script may have been sent:
                // the lock may or may not have been taken.
                self.history.record(acquire.op, EventKind::AcquireUnknown)?;
                tokio::time::sleep(Duration::from_millis(50)).await;
                return Ok(());
            }
            Err(e) => {
                let reason = e.chain().to_string();
                self.history
                    .record(acquire.op, EventKind::AcquireFail { reason })?;
                if !e.is_timeout() {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                return Ok(());
            }
        };
        let token = guard.token();
        self.history.record(
            acquire.op,
            EventKind::AcquireOk {
                fencing_token: token,
            },
        )?;
        self.summary.acquired += 1;
        let ending = self.critical_section(&guard, token, acquire.op).await?;
        if let Ending::Lost = ending {
            self.history.record(acquire.op, EventKind::LostSignal)?;
            self.summary.lost += 1;
        }
        let release = self.history.invoke(EventKind::ReleaseInvoke)?;
        match guard.unlock().await {
            Ok(()) => {
                self.history.record(release.op, EventKind::ReleaseOk)?;
            }
            Err(e) => {
                self.history.record(
                    release.op,
                    EventKind::ReleaseFail {
                        reason: e.chain().to_string(),
                    },
                )?;
            }
        }
        Ok(())
    }

    async fn critical_section(
        &mut self,
        guard: &Held,
        token: u64,
        acquire_op: u64,
    ) -> Result<Ending, BoxError> {
        let careful = self.config.check_lost_before_write;
        for i in 0..self.config.writes_per_hold {
            if i > 0 {
                let pause =
                    tokio::time::sleep(Duration::from_millis(self.config.write_interval_ms));
                if careful {
                    tokio::select! {
                        biased;
                        _ = guard.lost() => return Ok(Ending::Lost),
                        _ = pause => {}
                    }
                } else {
                    pause.await;
                }
            }
            if careful && guard.is_lost() {
                return Ok(Ending::Lost);
            }
            let value = format!("{}#{acquire_op}.{i}", self.history.process());
            let write = self.history.invoke(EventKind::WriteInvoke {
                token,
                value: value.clone(),
            })?;
            match self.store.write(token, &value).await {
                Ok(true) => {
                    self.history.record(write.op, EventKind::WriteOk)?;
                }
                Ok(false) => {
                    self.history.record(write.op, EventKind::WriteRejected)?;
                    self.summary.rejected_writes += 1;
                    // The store saw a newer token: somebody else got the lock, so ours is
                    // gone. The library must say so.
                    let wait = Duration::from_millis(self.config.lost_wait_ms);
                    return match tokio::time::timeout(wait, guard.lost()).await {
                        Ok(()) => Ok(Ending::Lost),
                        Err(_) => {
                            self.summary.lost_not_signalled += 1;
                            eprintln!(
                                "worker {}: the store refused token {token} but lost() did not \
                                 fire within {wait:?}",
                                self.config.worker
                            );
                            Ok(Ending::Done)
                        }
                    };
                }
                Err(e) => {
                    // The store is never faulted; leave the write without completion.
                    eprintln!("worker {}: store write failed: {e}", self.config.worker);
                    return Ok(Ending::Done);
                }
            }
            if !careful && guard.is_lost() {
                return Ok(Ending::Lost);
            }
        }
        Ok(Ending::Done)
    }
}

/// Runs one worker until it stops by itself; returns its summary (also
/// written to its summary file).
///
/// # Errors
///
/// If the run directory cannot be written, the store cannot be reached, or
/// the lock server cannot be reached before the deadline.
pub async fn run(config: WorkerConfig) -> Result<WorkerSummary, BoxError> {
    let started = tokio::time::Instant::now();
    let deadline = started + Duration::from_millis(config.run_for_ms);
    std::fs::create_dir_all(&config.dir)?;
    let store = StoreClient::connect(&config.store_url, &config.store_key).await?;
    let (client, backend, owner) = if config.redlock_urls.is_empty() {
        let client = connect_client(&config, &config.lock_url, deadline).await?;
        let name = config.lock_name.as_str();
        // Every acquire is an owner of its own (`<client id>:<n>`): the history names the
        // process by its client id, which every owner id it uses starts with.
        let owner = client.id().to_owned();
        let backend = match config.primitive {
            Primitive::Lock => Backend::Lock(client.lock(name)),
            Primitive::FairLock => {
                let mut lock = client.fair_lock(name);
                if let Some(ms) = config.waiter_timeout_ms {
                    lock = lock.with_thread_wait_time(Duration::from_millis(ms))?;
                }
                Backend::Fair(lock)
            }
            Primitive::WriteLock => Backend::Write(client.rw_lock(name).write()),
            Primitive::Election => {
                let value = format!("worker-{}", config.worker);
                Backend::Election {
                    election: client.election(name),
                    value,
                }
            }
            // No rounds: the scheduler decides when a hold starts.
            Primitive::Job => return job::run(config, client, store, deadline).await,
        };
        (client, backend, owner)
    } else {
        let mut clients = Vec::new();
        for url in &config.redlock_urls {
            clients.push(connect_client(&config, url, deadline).await?);
        }
        let redlock = RedLock::builder(config.lock_name.as_str(), clients.clone())
            .per_node_timeout(Duration::from_millis(config.redlock_node_timeout_ms))
            .build()?;
        // Every RedLock acquire is a new owner; the history names the process by its first
        // client's id.
        let owner = clients[0].id().to_owned();
        (clients[0].clone(), Backend::RedLock(redlock), owner)
    };
    let mut summary = WorkerSummary::default();
    let history = adopt_handle(&config, owner, &mut summary)?;
    let seed = 0x9E37_79B9_7F4A_7C15_u64 ^ (u64::from(config.worker) + 1).wrapping_mul(0x2545_F491);
    let mut worker = Worker {
        config,
        client,
        backend,
        history,
        store,
        summary,
        jitter: Jitter(seed | 1),
    };
    let stop = stop_file(&worker.config.dir);
    let reason = loop {
        if worker.summary.acquired >= worker.config.max_acquires {
            break "max_acquires";
        }
        if worker.summary.attempts >= worker.config.max_attempts {
            break "max_attempts";
        }
        if tokio::time::Instant::now() >= deadline {
            break "deadline";
        }
        if stop.exists() {
            break "stop file";
        }
        worker.round().await?;
        let think = worker.jitter.next(worker.config.think_ms);
        if think > 0 {
            tokio::time::sleep(Duration::from_millis(think)).await;
        }
    };
    worker.summary.stopped_because = reason.to_owned();
    conclude(&worker.config, &worker.client, worker.summary).await
}

/// Lets lingering subscriptions and background releases finish, notes what is left of them in
/// `summary` and writes it to the summary file.
async fn conclude(
    config: &WorkerConfig,
    client: &Client,
    mut summary: WorkerSummary,
) -> Result<WorkerSummary, BoxError> {
    let settle = tokio::time::Instant::now() + Duration::from_secs(5);
    while (client.subscription_count() > 0 || client.tracked_lock_count() > 0)
        && tokio::time::Instant::now() < settle
    {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    summary.subscriptions_at_exit = client.subscription_count();
    summary.tracked_locks_at_exit = client.tracked_lock_count();
    let text = serde_json::to_string_pretty(&summary)?;
    write_atomically(&summary_file(&config.dir, config.worker), &text)?;
    Ok(summary)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_round_trips_through_json() {
        let mut config = WorkerConfig::new(3, "/tmp/run");
        config.lease_ms = Some(1500);
        let text = serde_json::to_string(&config).unwrap();
        let back: WorkerConfig = serde_json::from_str(&text).unwrap();
        assert_eq!(back, config);
    }

    #[test]
    fn jitter_stays_in_bounds() {
        let mut jitter = Jitter(7);
        for _ in 0..1000 {
            assert!(jitter.next(10) <= 10);
        }
        assert_eq!(jitter.next(0), 0);
    }

    #[test]
    fn file_names_do_not_look_like_histories() {
        let dir = Path::new("/run");
        for path in [owner_file(dir, 1), summary_file(dir, 1), stop_file(dir)] {
            assert_ne!(path.extension().and_then(|e| e.to_str()), Some("jsonl"));
        }
    }
}
