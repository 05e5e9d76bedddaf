//! Driving a chaos run: worker processes, the holder-targeting faults, and
//! the leftover accounting after the run quiesces.
//!
//! A scenario test starts its servers with `latchkey_test_support`, then a
//! [`Run`] of `chaos-worker` processes (one per worker slot) sharing a run
//! directory, injects its faults (for faults aimed at the lock holder it asks
//! [`Run::stop_holder`] for a process that is provably inside its critical
//! section), tells the workers to stop ([`Run::stop_workers`]), waits for them
//! ([`Run::wait`]), checks the merged history, and accounts for what is left in
//! Redis with [`quiesce`].
//!
//! Everything here is synchronous (threads and blocking calls), so it runs the
//! same from a plain `#[test]`. Child processes are spawned from the calling
//! thread (the kernel kills them if it dies: the worker sets
//! `PR_SET_PDEATHSIG`) and are killed when the [`Run`] is dropped.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::OpenOptions;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use crate::checker::Leftovers;
use crate::history::{now_ns, read_histories, read_history_file, Event, EventKind, HistoryWriter};
use crate::worker::{
    owner_file, stop_file, summary_file, Primitive, WorkerConfig, WorkerSummary, JOB_NAME,
};

/// Whether the long soak was asked for (`LATCHKEY_SOAK=1`, or any value but
/// `0` and the empty string).
pub fn soak() -> bool {
    std::env::var("LATCHKEY_SOAK").is_ok_and(|v| !v.is_empty() && v != "0")
}

/// Reads the state letter of `/proc/PID/stat` (`R`, `S`, `T`, `Z`, …).
pub fn proc_state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().next()?.chars().next()
}

/// Sends `signal` to `pid`; returns whether the call succeeded.
pub fn send_signal(pid: u32, signal: libc::c_int) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return false;
    };
    if pid <= 0 {
        return false;
    }
    // SAFETY: kill(2) has no memory-safety preconditions.
    unsafe { libc::kill(pid, signal) == 0 }
}

/// Polls `condition` every `every` until it holds or `within` passes;
/// returns whether it held.
pub fn poll_until(within: Duration, every: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + within;
    loop {
        if condition() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(every);
    }
}

/// A blocking admin connection that reconnects after errors (the server may
/// be restarted under it) and never waits long.
pub struct Admin {
    client: redis::Client,
    conn: Option<redis::Connection>,
    timeout: Duration,
}

impl std::fmt::Debug for Admin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Admin")
            .field(
                "addr",
                &self.client.get_connection_info().addr().to_string(),
            )
            .finish_non_exhaustive()
    }
}

impl Admin {
    /// An admin connection for `client` (made on first use), with 2 s
    /// timeouts.
    pub fn new(client: redis::Client) -> Admin {
        Admin {
            client,
            conn: None,
            timeout: Duration::from_secs(2),
        }
    }

    /// Runs `cmd`; after an error the connection is dropped and made again
    /// by the next call.
    ///
    /// # Errors
    ///
    /// Connection errors and error replies.
    pub fn query<T: redis::FromRedisValue>(&mut self, cmd: &redis::Cmd) -> redis::RedisResult<T> {
        let reused = self.conn.is_some();
        match self.try_query(cmd) {
            // A connection made before a server restart fails once: try again on a new one.
            Err(e) if reused && self.conn.is_none() && !e.is_timeout() => self.try_query(cmd),
            result => result,
        }
    }

    fn try_query<T: redis::FromRedisValue>(&mut self, cmd: &redis::Cmd) -> redis::RedisResult<T> {
        if self.conn.is_none() {
            let conn = self.client.get_connection_with_timeout(self.timeout)?;
            conn.set_read_timeout(Some(self.timeout))?;
            conn.set_write_timeout(Some(self.timeout))?;
            self.conn = Some(conn);
        }
        let conn = self.conn.as_mut().expect("connected above");
        let result = cmd.query(conn);
        if let Err(e) = &result {
            if e.is_io_error()
                || e.is_timeout()
                || e.is_connection_dropped()
                || e.is_connection_refusal()
            {
                self.conn = None;
            }
        }
        result
    }

    /// The client ids (processes) holding the lock hash `name` (empty when
    /// it is free or the server cannot be asked): its fields, except a
    /// read-write lock's `mode`, with a write hold's `:write` suffix and the
    /// owner id's acquire number (`<client id>:<n>`) taken off.
    pub fn holders(&mut self, name: &str) -> Vec<String> {
        let fields: Vec<String> = self
            .query(redis::cmd("HKEYS").arg(name))
            .unwrap_or_default();
        fields
            .into_iter()
            .filter(|f| f != "mode")
            .map(|f| client_of(f.strip_suffix(":write").unwrap_or(&f)).to_owned())
            .collect()
    }
}

/// The client id (a worker process) of an owner id `<client id>:<n>`: every acquire is an
/// owner of its own.
pub fn client_of(owner: &str) -> &str {
    owner.rsplit_once(':').map_or(owner, |(client, _)| client)
}

/// Where a worker process is in its loop, judged from its history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CriticalSection {
    /// The holding process (owner id).
    pub process: String,
    /// Its fencing token.
    pub token: u64,
    /// When it got the lock (`CLOCK_MONOTONIC` ns).
    pub acquired_ns: u64,
    /// Writes it started in this critical section.
    pub writes_started: u32,
    /// Its last recorded event.
    pub last: EventKind,
    /// When that was recorded (`CLOCK_MONOTONIC` ns).
    pub last_ns: u64,
}

/// The critical section a worker is in according to its `events` (one
/// worker's history in file order): the last `AcquireOk` not followed by a
/// `ReleaseInvoke` or `LostSignal` of the same process.
pub fn critical_section(events: &[Event]) -> Option<CriticalSection> {
    let mut current: Option<CriticalSection> = None;
    for event in events {
        match &event.kind {
            EventKind::AcquireOk { fencing_token } => {
                current = Some(CriticalSection {
                    process: event.process.clone(),
                    token: *fencing_token,
                    acquired_ns: event.time_ns,
                    writes_started: 0,
                    last: event.kind.clone(),
                    last_ns: event.time_ns,
                });
            }
            EventKind::ReleaseInvoke | EventKind::LostSignal => {
                if current.as_ref().is_some_and(|c| c.process == event.process) {
                    current = None;
                }
            }
            kind => {
                if let Some(c) = current.as_mut().filter(|c| c.process == event.process) {
                    if let EventKind::WriteInvoke { .. } = kind {
                        c.writes_started += 1;
                    }
                    c.last = kind.clone();
                    c.last_ns = event.time_ns;
                }
            }
        }
    }
    current
}

/// A worker process stopped (SIGSTOP) inside its critical section by
/// [`Run::stop_holder`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoppedHolder {
    /// The worker slot.
    pub worker: u32,
    /// Its process id.
    pub pid: u32,
    /// What it was doing when it stopped.
    pub section: CriticalSection,
    /// When it was stopped (`CLOCK_MONOTONIC` ns).
    pub stopped_ns: u64,
}

struct Slot {
    worker: u32,
    child: Option<Child>,
    pid: u32,
    /// Processes started for this slot so far.
    started: u32,
}

/// The worker processes of one chaos run and their run directory.
pub struct Run {
    dir: PathBuf,
    bin: PathBuf,
    template: WorkerConfig,
    slots: Vec<Slot>,
}

impl std::fmt::Debug for Run {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Run")
            .field("dir", &self.dir)
            .field("workers", &self.slots.len())
            .finish_non_exhaustive()
    }
}

impl Run {
    /// Empties `dir` and starts `workers` processes of the worker binary
    /// `bin`, slot `i` with `template` for worker `i` in `dir`.
    ///
    /// # Panics
    ///
    /// If the directory cannot be prepared or a process cannot start.
    pub fn start(bin: &Path, dir: &Path, template: &WorkerConfig, workers: u32) -> Run {
        if dir.exists() {
            std::fs::remove_dir_all(dir)
                .unwrap_or_else(|e| panic!("cannot empty {}: {e}", dir.display()));
        }
        std::fs::create_dir_all(dir)
            .unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
        let mut run = Run {
            dir: dir.to_path_buf(),
            bin: bin.to_path_buf(),
            template: template.clone(),
            slots: Vec::new(),
        };
        for worker in 0..workers {
            run.slots.push(Slot {
                worker,
                child: None,
                pid: 0,
                started: 0,
            });
            run.respawn(worker);
        }
        run
    }

    /// The run directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The configuration worker `worker` runs with.
    pub fn config(&self, worker: u32) -> WorkerConfig {
        let mut config = self.template.clone();
        config.worker = worker;
        config.dir = self.dir.clone();
        config
    }

    fn slot(&mut self, worker: u32) -> &mut Slot {
        self.slots
            .iter_mut()
            .find(|s| s.worker == worker)
            .unwrap_or_else(|| panic!("no worker slot {worker}"))
    }

    /// Starts a (new) process for slot `worker`, e.g. after it was killed.
    /// Its stderr goes to `worker-NNNNN.log` in the run directory.
    ///
    /// # Panics
    ///
    /// If the process cannot be started.
    pub fn respawn(&mut self, worker: u32) {
        let config = self.config(worker);
        let json = serde_json::to_string(&config).expect("a worker config serializes");
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join(format!("worker-{worker:05}.log")))
            .expect("open the worker log");
        let _ = std::fs::remove_file(owner_file(&self.dir, worker));
        let child = Command::new(&self.bin)
            .arg(json)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(log))
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", self.bin.display()));
        let slot = self.slot(worker);
        slot.pid = child.id();
        slot.child = Some(child);
        slot.started += 1;
    }

    /// The workers' slots.
    pub fn workers(&self) -> Vec<u32> {
        self.slots.iter().map(|s| s.worker).collect()
    }

    /// How many processes were started in all (restarts included).
    pub fn processes_started(&self) -> u32 {
        self.slots.iter().map(|s| s.started).sum()
    }

    /// The process id of slot `worker`'s current process.
    pub fn pid(&self, worker: u32) -> u32 {
        self.slots
            .iter()
            .find(|s| s.worker == worker)
            .map_or(0, |s| s.pid)
    }

    /// The owner id slot `worker`'s current process uses (once it has
    /// connected).
    pub fn owner(&self, worker: u32) -> Option<String> {
        std::fs::read_to_string(owner_file(&self.dir, worker))
            .ok()
            .map(|s| s.trim().to_owned())
            .filter(|s| !s.is_empty())
    }

    /// The slot whose current process uses `owner`.
    pub fn worker_of(&self, owner: &str) -> Option<u32> {
        self.slots
            .iter()
            .map(|s| s.worker)
            .find(|&w| self.owner(w).as_deref() == Some(owner))
    }

    /// Slot `worker`'s history so far (all its processes).
    pub fn history(&self, worker: u32) -> Vec<Event> {
        let path = self.dir.join(HistoryWriter::file_name(worker));
        read_history_file(&path)
            .map(|h| h.events)
            .unwrap_or_default()
    }

    /// The merged history of every worker.
    ///
    /// # Panics
    ///
    /// If a history file is corrupt.
    pub fn events(&self) -> Vec<Event> {
        read_histories(&self.dir)
            .unwrap_or_else(|e| panic!("cannot read the histories in {}: {e}", self.dir.display()))
    }

    /// How many `AcquireOk` events were recorded after `since_ns`.
    pub fn acquired_since(&self, since_ns: u64) -> usize {
        self.workers()
            .into_iter()
            .flat_map(|w| self.history(w))
            .filter(|e| e.time_ns > since_ns && matches!(e.kind, EventKind::AcquireOk { .. }))
            .count()
    }

    /// Waits until at least `n` acquisitions were recorded after `since_ns`
    /// (every worker recovered from a fault), or `within` passes; returns
    /// whether they were.
    pub fn wait_for_progress(&self, since_ns: u64, n: usize, within: Duration) -> bool {
        poll_until(within, Duration::from_millis(50), || {
            self.acquired_since(since_ns) >= n
        })
    }

    /// Whether slot `worker`'s process is still running (reaps it if not).
    pub fn is_running(&mut self, worker: u32) -> bool {
        let slot = self.slot(worker);
        match slot.child.as_mut() {
            Some(child) => matches!(child.try_wait(), Ok(None)),
            None => false,
        }
    }

    /// Stops slot `worker`'s process with SIGSTOP and waits until the kernel
    /// reports it stopped.
    pub fn stop_process(&self, worker: u32) {
        let pid = self.pid(worker);
        send_signal(pid, libc::SIGSTOP);
        poll_until(Duration::from_secs(5), Duration::from_millis(1), || {
            proc_state(pid).is_none_or(|s| s == 'T' || s == 't')
        });
    }

    /// Continues slot `worker`'s process (SIGCONT).
    pub fn continue_process(&self, worker: u32) {
        send_signal(self.pid(worker), libc::SIGCONT);
    }

    /// Kills slot `worker`'s process with SIGKILL and reaps it.
    pub fn kill(&mut self, worker: u32) {
        let slot = self.slot(worker);
        if let Some(mut child) = slot.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Finds the process holding lock `lock_name` (asking Redis through
    /// `admin`), stops it with SIGSTOP, and checks its history: if it is
    /// inside its critical section and `accept` approves of what it was
    /// doing, it stays stopped and is returned; otherwise (it released in
    /// the meantime, or has not recorded its `AcquireOk` yet) it is continued
    /// and the search starts again. `None` if no such holder was found
    /// within `within`.
    pub fn stop_holder(
        &self,
        admin: &mut Admin,
        lock_name: &str,
        within: Duration,
        mut accept: impl FnMut(&CriticalSection) -> bool,
    ) -> Option<StoppedHolder> {
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            let holders = admin.holders(lock_name);
            let Some(worker) = holders.iter().find_map(|owner| self.worker_of(owner)) else {
                std::thread::sleep(Duration::from_millis(2));
                continue;
            };
            self.stop_process(worker);
            let stopped_ns = now_ns();
            let section = critical_section(&self.history(worker));
            match section {
                Some(section) if accept(&section) => {
                    return Some(StoppedHolder {
                        worker,
                        pid: self.pid(worker),
                        section,
                        stopped_ns,
                    })
                }
                _ => {
                    self.continue_process(worker);
                    std::thread::sleep(Duration::from_millis(5));
                }
            }
        }
        None
    }

    /// Tells every worker to stop after its current critical section (the
    /// stop file).
    ///
    /// # Panics
    ///
    /// If the stop file cannot be written.
    pub fn stop_workers(&self) {
        std::fs::write(stop_file(&self.dir), b"stop\n").expect("write the stop file");
    }

    /// Waits until every worker process has exited, at most `within`; then
    /// kills the stragglers. Returns each slot's exit status, or an error
    /// naming the slots that had to be killed.
    ///
    /// # Errors
    ///
    /// The workers that did not stop by themselves.
    pub fn wait(&mut self, within: Duration) -> Result<Vec<(u32, ExitStatus)>, String> {
        let deadline = Instant::now() + within;
        let mut statuses = Vec::new();
        let mut stuck = Vec::new();
        for slot in &mut self.slots {
            let Some(child) = slot.child.as_mut() else {
                continue;
            };
            loop {
                match child.try_wait() {
                    Ok(Some(status)) => {
                        statuses.push((slot.worker, status));
                        break;
                    }
                    Ok(None) if Instant::now() < deadline => {
                        std::thread::sleep(Duration::from_millis(20));
                    }
                    _ => {
                        send_signal(slot.pid, libc::SIGCONT);
                        let _ = child.kill();
                        let _ = child.wait();
                        stuck.push(slot.worker);
                        break;
                    }
                }
            }
            slot.child = None;
        }
        if stuck.is_empty() {
            Ok(statuses)
        } else {
            Err(format!(
                "workers {stuck:?} did not stop within {within:?} and were killed"
            ))
        }
    }

    /// The summaries of the workers that stopped normally.
    pub fn summaries(&self) -> Vec<(u32, WorkerSummary)> {
        self.workers()
            .into_iter()
            .filter_map(|w| {
                let text = std::fs::read_to_string(summary_file(&self.dir, w)).ok()?;
                Some((w, serde_json::from_str(&text).ok()?))
            })
            .collect()
    }

    /// The tail of slot `worker`'s log (its stderr), for failure messages.
    pub fn log(&self, worker: u32) -> String {
        let text = std::fs::read_to_string(self.dir.join(format!("worker-{worker:05}.log")))
            .unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }
}

impl Drop for Run {
    fn drop(&mut self) {
        for slot in &mut self.slots {
            if let Some(child) = slot.child.as_mut() {
                send_signal(slot.pid, libc::SIGCONT);
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}

/// The keys and channel of lock `name` of one [`Primitive`] (latchkey's
/// layout).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockKeyNames {
    /// The lock hash.
    pub lock: String,
    /// The fencing counter (expires once the lock has been idle for a while, by design).
    pub token: String,
    /// The counter's field when [`LockKeyNames::token`] is a hash (a job's `token`); `None`
    /// for a string counter.
    pub token_field: Option<String>,
    /// The channel every waiter of the lock listens on (a fair lock's
    /// waiters listen on `<channel>:<owner id>` instead).
    pub channel: String,
    /// The waiters' bookkeeping (wait queue, liveness, hand-off reservation,
    /// pending writers): every one of these keys expires by itself.
    pub waiting: Vec<String>,
    /// The longest expiry a key of [`LockKeyNames::waiting`] may have.
    pub waiting_ttl_ms: i64,
    /// Other keys that outlive the holds and expire once the lock is idle, like the fencing
    /// counter (an election's change log): not leftovers.
    pub idle_expiring: Vec<String>,
    /// How long the fencing counter and [`LockKeyNames::idle_expiring`] outlive the last
    /// lease ([`COUNTER_IDLE_MS`], or [`JOB_IDLE_MS`] for a job).
    pub idle_ms: i64,
}

/// The longest a key of latchkey's wait queue lives: a waiter registers
/// until its next attempt (at most 2 s away) plus 2 s of slack. The same
/// holds for a read-write lock's pending-writer marks.
pub const WAIT_QUEUE_TTL_MS: i64 = 4000;

/// How long latchkey keeps a fencing counter (and an election's change log) after the last
/// lease that used it: it expires then, so an idle lock leaves no key behind.
pub const COUNTER_IDLE_MS: i64 = 60_000;

/// How long a scheduler group's keys (a job's hash, with its fencing token, and the group's
/// index) live after its last claim or registration: a week, so that a job's next occurrence
/// and its tokens survive every node being down for a while.
pub const JOB_IDLE_MS: i64 = 7 * 24 * 3600 * 1000;

impl LockKeyNames {
    /// The names for [`latchkey_redis::Lock`] `name`: `<prefix>:{<name>}`, or
    /// `<prefix>:<name>` when the name has a `{` of its own (Redisson's
    /// `prefixName`, which latchkey follows so that every key of a lock
    /// shares its cluster slot).
    pub fn new(name: &str) -> LockKeyNames {
        LockKeyNames::of(Primitive::Lock, name, Duration::ZERO)
    }

    /// The names for lock `name` of kind `primitive`; `waiter_timeout` is a
    /// fair lock's (it bounds the expiry of its queue keys).
    pub fn of(primitive: Primitive, name: &str, waiter_timeout: Duration) -> LockKeyNames {
        let derived = |prefix: &str| {
            if name.contains('{') {
                format!("{prefix}:{name}")
            } else {
                format!("{prefix}:{{{name}}}")
            }
        };
        match primitive {
            Primitive::Lock => LockKeyNames {
                lock: name.to_owned(),
                token: derived("redisson_lock_token"),
                token_field: None,
                channel: derived("redisson_lock__channel"),
                waiting: vec![
                    derived("latchkey_lock_queue"),
                    derived("latchkey_lock_alive"),
                    derived("latchkey_lock_handoff"),
                ],
                waiting_ttl_ms: WAIT_QUEUE_TTL_MS,
                idle_expiring: Vec::new(),
                idle_ms: COUNTER_IDLE_MS,
            },
            Primitive::FairLock => LockKeyNames {
                lock: name.to_owned(),
                token: derived("redisson_lock_token"),
                token_field: None,
                channel: derived("redisson_lock__channel"),
                waiting: vec![
                    derived("redisson_lock_queue"),
                    derived("redisson_lock_timeout"),
                ],
                waiting_ttl_ms: waiter_timeout.as_millis() as i64,
                idle_expiring: Vec::new(),
                idle_ms: COUNTER_IDLE_MS,
            },
            Primitive::WriteLock => LockKeyNames {
                lock: name.to_owned(),
                token: derived("latchkey_rwlock_token"),
                token_field: None,
                channel: derived("redisson_rwlock"),
                waiting: vec![derived("latchkey_rwlock_writers")],
                waiting_ttl_ms: WAIT_QUEUE_TTL_MS,
                idle_expiring: Vec::new(),
                idle_ms: COUNTER_IDLE_MS,
            },
            Primitive::Election => LockKeyNames {
                lock: derived("latchkey_election"),
                token: derived("latchkey_election_term"),
                token_field: None,
                channel: derived("latchkey_election_channel"),
                waiting: vec![
                    derived("latchkey_election_queue"),
                    derived("latchkey_election_alive"),
                    derived("latchkey_election_handoff"),
                ],
                waiting_ttl_ms: WAIT_QUEUE_TTL_MS,
                idle_expiring: vec![derived("latchkey_election_log")],
                idle_ms: COUNTER_IDLE_MS,
            },
            // `name` is the scheduler group; its one job is JOB_NAME. The run hash is the
            // lock (a claim's field, its lease), the job hash keeps the token.
            Primitive::Job => LockKeyNames {
                lock: format!("{}:{JOB_NAME}", derived("latchkey_job_run")),
                token: format!("{}:{JOB_NAME}", derived("latchkey_job")),
                token_field: Some("token".to_owned()),
                channel: derived("latchkey_jobs_channel"),
                waiting: Vec::new(),
                waiting_ttl_ms: 0,
                idle_expiring: vec![derived("latchkey_jobs")],
                idle_ms: JOB_IDLE_MS,
            },
        }
    }

    /// The names for the lock the workers of `config` contend for.
    pub fn for_workers(config: &WorkerConfig) -> LockKeyNames {
        let waiter_timeout = config.waiter_timeout_ms.map_or(
            latchkey_redis::FairLock::DEFAULT_THREAD_WAIT_TIME,
            Duration::from_millis,
        );
        LockKeyNames::of(config.primitive, &config.lock_name, waiter_timeout)
    }
}

/// What [`quiesce`] found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Quiesced {
    /// What was left once everything that expires by itself had expired.
    pub leftovers: Leftovers,
    /// The fencing counter's value (`None`: absent).
    pub token_counter: Option<u64>,
    /// The fencing counter's PTTL in ms (`None`: absent).
    pub token_counter_pttl: Option<i64>,
    /// Every key present when the workers had stopped, with its type and
    /// PTTL in ms.
    pub keys_at_stop: BTreeMap<String, (String, i64)>,
    /// How long it took until only the fencing counter was left.
    pub settled_after: Option<Duration>,
}

impl Quiesced {
    /// One line for reports: what was there when the workers stopped and how
    /// it went away.
    pub fn accounting(&self) -> String {
        let mut parts: Vec<String> = self
            .keys_at_stop
            .iter()
            .map(|(key, (kind, pttl))| format!("{key} ({kind}, pttl {pttl} ms)"))
            .collect();
        if parts.is_empty() {
            parts.push("no keys".into());
        }
        format!(
            "at stop: {}; fencing counter {:?} (pttl {:?} ms); settled after {}",
            parts.join(", "),
            self.token_counter,
            self.token_counter_pttl,
            self.settled_after
                .map_or_else(|| "never".to_owned(), |d| format!("{} ms", d.as_millis()))
        )
    }
}

impl Quiesced {
    /// What was wrong with the keys present when the workers stopped, given
    /// the lock's `names` and the longest lease used: the fencing counter
    /// (and the other idle-expiring keys) must expire within the lease plus
    /// [`LockKeyNames::idle_ms`], the lock hash within
    /// `max_lease_ms`, the waiters' keys one of at most
    /// [`LockKeyNames::waiting_ttl_ms`]; no other key may exist. Empty when
    /// everything is accounted for. A PTTL of 0 is an expiry due within the
    /// millisecond (not "none", which is -1).
    pub fn unaccounted_keys(&self, names: &LockKeyNames, max_lease_ms: i64) -> Vec<String> {
        let mut problems = Vec::new();
        for (key, (kind, pttl)) in &self.keys_at_stop {
            let idle_expiry = *pttl >= 0 && *pttl <= max_lease_ms + names.idle_ms;
            let counter_kind = if names.token_field.is_some() {
                "hash"
            } else {
                "string"
            };
            let ok = if *key == names.token {
                kind == counter_kind && idle_expiry
            } else if names.idle_expiring.contains(key) || is_registration(key) {
                idle_expiry
            } else if *key == names.lock {
                kind == "hash" && *pttl >= 0 && *pttl <= max_lease_ms
            } else if names.waiting.contains(key) {
                *pttl >= 0 && *pttl <= names.waiting_ttl_ms
            } else {
                false
            };
            if !ok {
                problems.push(format!("{key} ({kind}, pttl {pttl} ms)"));
            }
        }
        problems
    }
}

/// A client's registration (`latchkey_client:{<client id>}`: host, process, name), which its
/// watchdog keeps while it holds anything and which expires a watchdog timeout after that.
fn is_registration(key: &str) -> bool {
    key.starts_with("latchkey_client:")
}

fn scan_keys(admin: &mut Admin) -> Vec<String> {
    let mut keys = BTreeSet::new();
    let mut cursor = 0u64;
    loop {
        let Ok((next, batch)): redis::RedisResult<(u64, Vec<String>)> =
            admin.query(redis::cmd("SCAN").arg(cursor).arg("COUNT").arg(1000))
        else {
            break;
        };
        keys.extend(batch);
        if next == 0 {
            break;
        }
        cursor = next;
    }
    keys.into_iter().collect()
}

fn key_type(admin: &mut Admin, key: &str) -> String {
    admin
        .query(redis::cmd("TYPE").arg(key))
        .unwrap_or_else(|_| "?".into())
}

fn pttl(admin: &mut Admin, key: &str) -> i64 {
    admin.query(redis::cmd("PTTL").arg(key)).unwrap_or(-3)
}

/// Subscribed channels with their subscriber counts: the lock's unlock
/// channel (`PUBSUB NUMSUB`), and every other channel `PUBSUB CHANNELS` lists
/// except Sentinel's own `__sentinel__:*`.
pub fn subscribed_channels(admin: &mut Admin, names: &LockKeyNames) -> Vec<(String, i64)> {
    let mut channels: Vec<String> = admin
        .query(&redis::cmd("PUBSUB").arg("CHANNELS").to_owned())
        .unwrap_or_default();
    channels.retain(|c| !c.starts_with("__sentinel__:"));
    let own = names.channel.clone();
    if !channels.contains(&own) {
        channels.push(own);
    }
    let mut out = Vec::new();
    for channel in channels {
        let numsub: (String, i64) = admin
            .query(redis::cmd("PUBSUB").arg("NUMSUB").arg(&channel))
            .unwrap_or((channel.clone(), -1));
        if numsub.1 != 0 {
            out.push(numsub);
        }
    }
    out
}

/// Waits (at most `settle`) until the lock server holds nothing of the lock
/// (`names`) but its fencing counter and nobody is subscribed to anything,
/// then accounts for what is left:
///
/// * `lock_keys`: the lock hash, and any key that is not one of the lock's
///   (the fencing counter is expected and expires once the lock is idle:
///   it is not a leftover);
/// * `hold_counts`: the hold fields of the lock hash (a read-write lock's
///   `mode` field is not a hold);
/// * `queue_entries`: members of the waiters' keys ([`LockKeyNames::waiting`]:
///   wait queues, liveness, hand-off reservation, pending writers) still
///   there after `settle` (they expire by themselves, by design);
/// * `subscriptions`: channels with subscribers (`PUBSUB CHANNELS`), and the
///   worker processes that reported subscriptions or tracked holds when
///   they stopped (`summaries`).
///
/// Call it after every worker process has exited.
pub fn quiesce(
    admin: &mut Admin,
    names: &LockKeyNames,
    settle: Duration,
    summaries: &[(u32, WorkerSummary)],
) -> Quiesced {
    let started = Instant::now();
    let mut quiesced = Quiesced::default();
    for key in scan_keys(admin) {
        let kind = key_type(admin, &key);
        let ttl = pttl(admin, &key);
        quiesced.keys_at_stop.insert(key, (kind, ttl));
    }
    let clean = |admin: &mut Admin| {
        scan_keys(admin)
            .iter()
            .all(|k| *k == names.token || names.idle_expiring.contains(k) || is_registration(k))
            && subscribed_channels(admin, names).is_empty()
    };
    if poll_until(settle, Duration::from_millis(50), || clean(admin)) {
        quiesced.settled_after = Some(started.elapsed());
    }
    let mut leftovers = Leftovers::default();
    for key in scan_keys(admin) {
        if key == names.token || names.idle_expiring.contains(&key) || is_registration(&key) {
            continue;
        }
        if key == names.lock {
            let fields: Vec<(String, String)> = admin
                .query(redis::cmd("HGETALL").arg(&key))
                .unwrap_or_default();
            for (owner, holds) in fields {
                if owner != "mode" {
                    leftovers
                        .hold_counts
                        .insert(owner, holds.parse().unwrap_or(u64::MAX));
                }
            }
            leftovers.lock_keys.push(key);
        } else if names.waiting.contains(&key) {
            let members: Vec<String> = match key_type(admin, &key).as_str() {
                "zset" => admin.query(redis::cmd("ZRANGE").arg(&key).arg(0).arg(-1)),
                "list" => admin.query(redis::cmd("LRANGE").arg(&key).arg(0).arg(-1)),
                "hash" => admin.query(redis::cmd("HKEYS").arg(&key)),
                _ => Ok(Vec::new()),
            }
            .unwrap_or_default();
            if members.is_empty() {
                leftovers.queue_entries.push(key);
            } else {
                leftovers
                    .queue_entries
                    .extend(members.into_iter().map(|m| format!("{key}: {m}")));
            }
        } else {
            leftovers.lock_keys.push(key);
        }
    }
    for (channel, n) in subscribed_channels(admin, names) {
        leftovers
            .subscriptions
            .push(format!("{channel} ({n} subscribers)"));
    }
    for (worker, summary) in summaries {
        if summary.subscriptions_at_exit > 0 {
            leftovers.subscriptions.push(format!(
                "worker {worker}: {} channels still subscribed at exit",
                summary.subscriptions_at_exit
            ));
        }
        if summary.tracked_locks_at_exit > 0 {
            leftovers.hold_counts.insert(
                format!("worker {worker} (client registry)"),
                summary.tracked_locks_at_exit as u64,
            );
        }
    }
    let counter: Option<String> = match &names.token_field {
        Some(field) => admin.query(redis::cmd("HGET").arg(&names.token).arg(field)),
        None => admin.query(redis::cmd("GET").arg(&names.token)),
    }
    .unwrap_or(None);
    quiesced.token_counter = counter.and_then(|c| c.parse().ok());
    quiesced.token_counter_pttl = Some(pttl(admin, &names.token)).filter(|&p| p != -2);
    quiesced.leftovers = leftovers;
    quiesced
}

/// Writes `row` (a Markdown table row) and `notes` to `<dir>/row.md` and
/// prints them, so that `RELIABILITY.md` can be assembled from a real run.
pub fn publish_row(dir: &Path, row: &str, notes: &str) {
    let text = format!("{row}\n{notes}\n");
    let _ = std::fs::write(dir.join("row.md"), &text);
    println!("{text}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_at_stop_with_an_expiry_due_now_are_accounted_for() {
        let names = LockKeyNames::new("l");
        let registration = "latchkey_client:{c}".to_owned();
        let quiesced = |pttl: i64| Quiesced {
            keys_at_stop: BTreeMap::from([
                (registration.clone(), ("hash".to_owned(), pttl)),
                (names.token.clone(), ("string".to_owned(), 0)),
            ]),
            ..Quiesced::default()
        };
        // 0: due within the millisecond; -1: no expiry at all.
        assert_eq!(
            quiesced(0).unaccounted_keys(&names, 1000),
            Vec::<String>::new()
        );
        assert_eq!(
            quiesced(-1).unaccounted_keys(&names, 1000),
            vec![format!("{registration} (hash, pttl -1 ms)")]
        );
    }

    fn ev(op: u64, t: u64, process: &str, kind: EventKind) -> Event {
        Event::new(0, process, op, t, kind)
    }

    #[test]
    fn critical_section_follows_the_last_hold() {
        let mut events = vec![
            ev(0, 1, "a", EventKind::AcquireInvoke),
            ev(0, 2, "a", EventKind::AcquireOk { fencing_token: 4 }),
        ];
        let cs = critical_section(&events).unwrap();
        assert_eq!((cs.token, cs.writes_started), (4, 0));
        events.push(ev(
            1,
            3,
            "a",
            EventKind::WriteInvoke {
                token: 4,
                value: "v".into(),
            },
        ));
        assert_eq!(critical_section(&events).unwrap().writes_started, 1);
        events.push(ev(1, 4, "a", EventKind::WriteOk));
        assert_eq!(critical_section(&events).unwrap().last, EventKind::WriteOk);
        events.push(ev(2, 5, "a", EventKind::ReleaseInvoke));
        assert!(critical_section(&events).is_none());
        events.push(ev(3, 6, "a", EventKind::AcquireInvoke));
        events.push(ev(3, 7, "a", EventKind::AcquireOk { fencing_token: 9 }));
        events.push(ev(3, 8, "a", EventKind::LostSignal));
        assert!(critical_section(&events).is_none());
        // A restarted process does not inherit its predecessor's hold.
        events.push(ev(4, 9, "b", EventKind::AcquireInvoke));
        events.push(ev(4, 10, "b", EventKind::AcquireOk { fencing_token: 11 }));
        assert_eq!(critical_section(&events).unwrap().process, "b");
    }

    #[test]
    fn key_names_follow_the_library_layout() {
        let names = LockKeyNames::new("a");
        assert_eq!(names.token, "redisson_lock_token:{a}");
        assert_eq!(names.channel, "redisson_lock__channel:{a}");
        assert_eq!(names.waiting[2], "latchkey_lock_handoff:{a}");
        let names = LockKeyNames::new("a:{b}");
        assert_eq!(names.lock, "a:{b}");
        assert_eq!(names.token, "redisson_lock_token:a:{b}");
        assert_eq!(names.channel, "redisson_lock__channel:a:{b}");
        assert_eq!(
            names.waiting,
            [
                "latchkey_lock_queue:a:{b}",
                "latchkey_lock_alive:a:{b}",
                "latchkey_lock_handoff:a:{b}"
            ]
        );
        let fair = LockKeyNames::of(Primitive::FairLock, "a", Duration::from_secs(7));
        assert_eq!(fair.token, "redisson_lock_token:{a}");
        assert_eq!(
            fair.waiting,
            ["redisson_lock_queue:{a}", "redisson_lock_timeout:{a}",]
        );
        assert_eq!(fair.waiting_ttl_ms, 7000);
        let write = LockKeyNames::of(Primitive::WriteLock, "a", Duration::ZERO);
        assert_eq!(write.token, "latchkey_rwlock_token:{a}");
        assert_eq!(write.channel, "redisson_rwlock:{a}");
        assert_eq!(write.waiting, ["latchkey_rwlock_writers:{a}"]);
        let job = LockKeyNames::of(Primitive::Job, "g", Duration::ZERO);
        assert_eq!(job.lock, "latchkey_job_run:{g}:job");
        assert_eq!(job.token, "latchkey_job:{g}:job");
        assert_eq!(job.token_field.as_deref(), Some("token"));
        assert_eq!(job.channel, "latchkey_jobs_channel:{g}");
        assert_eq!(job.idle_expiring, ["latchkey_jobs:{g}"]);
    }

    #[test]
    fn process_states_are_read_from_proc() {
        assert!(proc_state(std::process::id()).is_some());
        assert!(proc_state(u32::MAX).is_none());
    }
}
