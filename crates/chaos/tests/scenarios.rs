//! The fault-injection scenarios: `chaos-worker` processes contend for one
//! latchkey lock on a real `redis-server` while one kind of fault is injected,
//! then the merged history is checked and the leftovers in Redis accounted
//! for.
//!
//! Each test is one scenario and one row of `RELIABILITY.md`. The default run
//! is the short CI version; `LATCHKEY_SOAK=1` runs the long soak (more
//! workers, more faults, longer runs):
//!
//! ```text
//! cargo test -p latchkey-chaos --test scenarios
//! LATCHKEY_SOAK=1 cargo test -p latchkey-chaos --test scenarios -- --nocapture
//! ```
//!
//! Scenarios run one at a time (a process-wide lock), whatever
//! `--test-threads` says: they are timing-sensitive and share two cores with
//! everything else. Histories, worker logs and the table row of the last run
//! of each scenario are kept in `<target>/tmp/chaos/<scenario>/` (the soak's in
//! `<target>/tmp/chaos-soak/<scenario>/`).
//!
//! Timing margins: leases are 1–5 s and every pause or outage that must make a
//! lease run out lasts at least 2 s longer than the lease, so a loaded machine
//! cannot turn a safe run into a flagged one. Nothing asserts an upper bound
//! on time; the waits below are hang guards only.

use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

use latchkey_chaos::checker::{HoldEnd, ViolationKind};
use latchkey_chaos::harness::{
    self, quiesce, soak, Admin, LockKeyNames, Quiesced, Run, StoppedHolder,
};
use latchkey_chaos::report::markdown_row;
use latchkey_chaos::worker::{Primitive, WorkerConfig, WorkerSummary};
use latchkey_chaos::{check, now_ns, CheckOptions, Event, EventKind, Mode, Report};
use latchkey_test_support::{FaultProxy, RedisServer, SentinelGroup};

/// Scenarios run one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

const LOCK: &str = "chaos-lock";
const STORE_KEY: &str = "chaos:store";
/// Hang guard for the workers to stop after the stop file appears.
const STOP_GUARD: Duration = Duration::from_secs(180);
/// Hang guard for the system to make progress after a fault.
const PROGRESS_GUARD: Duration = Duration::from_secs(180);
/// Hang guard for finding a holder to stop or kill.
const HOLDER_GUARD: Duration = Duration::from_secs(60);

/// Numbers that differ between the CI run and the soak.
struct Scale {
    workers: u32,
    /// How many times the scenario's fault is injected.
    faults: usize,
    /// Acquisitions per worker in the fault-free baseline.
    baseline_acquires: u64,
    /// Acquisitions (all workers together) to wait for between faults, in
    /// the CI run; the soak waits for about 20 s worth of critical sections.
    between_faults: usize,
}

impl Scale {
    /// Acquisitions to wait for after a fault when critical sections last
    /// about `hold_ms`.
    fn after_fault(&self, config: &WorkerConfig) -> usize {
        if soak() {
            let hold_ms = (u64::from(config.writes_per_hold) * config.write_interval_ms).max(20);
            (20_000 / hold_ms).clamp(3, self.between_faults as u64) as usize
        } else {
            self.between_faults
        }
    }
}

fn scale() -> Scale {
    if soak() {
        Scale {
            workers: 16,
            faults: 12,
            baseline_acquires: 400,
            between_faults: 40,
        }
    } else {
        Scale {
            workers: 6,
            faults: 2,
            baseline_acquires: 25,
            between_faults: 4,
        }
    }
}

/// The two servers of a run: the lock server and the fencing store.
struct Servers {
    lock: RedisServer,
    store: RedisServer,
}

impl Servers {
    fn spawn(lock: RedisServer) -> Servers {
        Servers {
            lock,
            store: RedisServer::spawn(),
        }
    }

    fn admin(&self) -> Admin {
        Admin::new(self.lock.client())
    }

    /// The largest token the fencing store accepted so far.
    fn store_token(&self) -> u64 {
        let mut admin = Admin::new(self.store.client());
        let token: Option<String> = admin
            .query(redis::cmd("HGET").arg(STORE_KEY).arg("token"))
            .unwrap_or(None);
        token.and_then(|t| t.parse().ok()).unwrap_or(0)
    }
}

fn run_dir(scenario: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(if soak() { "chaos-soak" } else { "chaos" })
        .join(scenario)
}

/// The command that reproduces `scenario` (CI version or soak).
fn command(scenario: &str) -> String {
    let soak = if soak() { "LATCHKEY_SOAK=1 " } else { "" };
    format!("{soak}cargo test -p latchkey-chaos --test scenarios -- --exact {scenario}")
}

fn template(servers: &Servers, lock_url: String) -> WorkerConfig {
    let mut config = WorkerConfig::new(0, "");
    config.lock_url = lock_url;
    config.store_url = servers.store.url();
    config.lock_name = LOCK.into();
    config.store_key = STORE_KEY.into();
    config.run_for_ms = if soak() { 1_800_000 } else { 240_000 };
    config
}

fn start(scenario: &str, template: &WorkerConfig, workers: u32) -> Run {
    Run::start(
        std::path::Path::new(env!("CARGO_BIN_EXE_chaos-worker")),
        &run_dir(scenario),
        template,
        workers,
    )
}

/// What a finished scenario produced.
struct Outcome {
    /// The keys and channel of the workers' lock.
    names: LockKeyNames,
    /// The longest lease a worker used (its watchdog timeout or fixed lease).
    max_lease_ms: i64,
    report: Report,
    events: Vec<Event>,
    quiesced: Quiesced,
    summaries: Vec<(u32, WorkerSummary)>,
}

impl Outcome {
    fn lost_signals(&self) -> u64 {
        self.report.counts.lost_signals
    }

    /// The largest token any worker recorded.
    fn max_token(&self) -> u64 {
        self.events
            .iter()
            .filter_map(|e| match e.kind {
                EventKind::AcquireOk { fencing_token } => Some(fencing_token),
                _ => None,
            })
            .max()
            .unwrap_or(0)
    }

    fn describe(&self) -> String {
        let violations: Vec<&str> = self
            .report
            .violations
            .iter()
            .take(5)
            .map(|v| v.description.as_str())
            .collect();
        format!(
            "counts: {:?}\nviolations: {:?} {violations:#?}\nleftovers: {:?}\naccounting: {}",
            self.report.counts,
            self.report.violation_counts,
            self.report.leftovers,
            self.quiesced.accounting()
        )
    }
}

/// Stops the workers, checks the history in `mode`, accounts for leftovers,
/// publishes the table row and returns everything for the scenario's
/// assertions.
fn finish(
    scenario: &str,
    run: &mut Run,
    servers: &Servers,
    mode: Mode,
    faults: &str,
    settle: Duration,
) -> Outcome {
    finish_with(scenario, run, &mut servers.admin(), mode, faults, settle)
}

/// [`finish`] with the lock server given as an admin connection.
fn finish_with(
    scenario: &str,
    run: &mut Run,
    admin: &mut Admin,
    mode: Mode,
    faults: &str,
    settle: Duration,
) -> Outcome {
    run.stop_workers();
    let statuses = run
        .wait(STOP_GUARD)
        .unwrap_or_else(|e| panic!("{scenario}: {e}"));
    for (worker, status) in &statuses {
        assert!(
            status.success(),
            "{scenario}: worker {worker} failed ({status}):\n{}",
            run.log(*worker)
        );
    }
    let events = run.events();
    let report = check(
        &events,
        &CheckOptions {
            mode,
            ..CheckOptions::default()
        },
    )
    .unwrap_or_else(|e| panic!("{scenario}: the history is malformed: {e}"));
    let summaries = run.summaries();
    let config = run.config(0);
    let names = LockKeyNames::for_workers(&config);
    let quiesced = quiesce(admin, &names, settle, &summaries);
    let report = report.with_leftovers(quiesced.leftovers.clone());
    let command = command(scenario);
    let row = markdown_row(scenario, &report, faults, &command);
    let outcome = Outcome {
        names,
        max_lease_ms: config.lease_ms.unwrap_or(config.watchdog_timeout_ms) as i64,
        report,
        events,
        quiesced,
        summaries,
    };
    harness::publish_row(run.dir(), &row, &outcome.describe());
    outcome
}

/// The assertions every scenario shares: nothing left behind, the fencing
/// counter kept (expiring once the lock is idle) and never behind the tokens
/// handed out, every stale hold signalled.
fn assert_clean(scenario: &str, outcome: &Outcome) {
    let leftovers = outcome
        .report
        .leftovers
        .as_ref()
        .expect("leftovers checked");
    assert!(
        leftovers.is_clean(),
        "{scenario}: left behind {}\n{}",
        leftovers.summary(),
        outcome.describe()
    );
    assert!(
        outcome
            .quiesced
            .token_counter_pttl
            .is_some_and(|pttl| pttl >= 0 && pttl <= outcome.max_lease_ms + outcome.names.idle_ms),
        "{scenario}: the fencing counter must outlive the holds and expire once the lock is idle\n{}",
        outcome.describe()
    );
    assert!(
        outcome.quiesced.token_counter.unwrap_or(0) >= outcome.max_token(),
        "{scenario}: the fencing counter is behind the tokens handed out\n{}",
        outcome.describe()
    );
    let unaccounted = outcome
        .quiesced
        .unaccounted_keys(&outcome.names, outcome.max_lease_ms);
    assert!(
        unaccounted.is_empty(),
        "{scenario}: keys present at stop that do not expire as designed: {unaccounted:?}"
    );
    for (worker, summary) in &outcome.summaries {
        assert_eq!(
            summary.lost_not_signalled, 0,
            "{scenario}: worker {worker} wrote with a stale token but lost() never fired"
        );
    }
}

fn assert_safe(scenario: &str, outcome: &Outcome) {
    assert!(
        outcome.report.is_safe(),
        "{scenario}: violations found\n{}",
        outcome.describe()
    );
    assert!(
        outcome.report.counts.holds > 0,
        "{scenario}: nobody ever held the lock"
    );
}

/// Waits until the workers made `n` more acquisitions after `since_ns`.
fn assert_progress(scenario: &str, run: &Run, since_ns: u64, n: usize) {
    assert!(
        run.wait_for_progress(since_ns, n, PROGRESS_GUARD),
        "{scenario}: no progress after the fault ({} acquisitions since)",
        run.acquired_since(since_ns)
    );
}

/// Waits until somebody holds the lock and returns its owner.
fn wait_for_holder(admin: &mut Admin) -> String {
    wait_for_holder_of(admin, LOCK)
}

/// Waits until somebody holds the lock hash `key` (an election's leader key) and returns
/// its owner.
fn wait_for_holder_of(admin: &mut Admin, key: &str) -> String {
    let mut owner = None;
    harness::poll_until(HOLDER_GUARD, Duration::from_millis(2), || {
        owner = admin.holders(key).into_iter().next();
        owner.is_some()
    });
    owner.expect("somebody holds the lock")
}

/// Waits until a *new* hold starts (the fencing counter moves) and returns
/// the new holder's owner id, so that a fault injected right after finds the
/// holder at the start of its critical section.
fn wait_for_fresh_holder(admin: &mut Admin) -> String {
    let token = |admin: &mut Admin| -> u64 {
        let value: Option<String> = admin
            .query(redis::cmd("GET").arg(LockKeyNames::new(LOCK).token))
            .unwrap_or(None);
        value.and_then(|v| v.parse().ok()).unwrap_or(0)
    };
    let before = token(admin);
    let mut owner = None;
    harness::poll_until(HOLDER_GUARD, Duration::from_millis(1), || {
        if token(admin) == before {
            return false;
        }
        owner = admin.holders(LOCK).into_iter().next();
        owner.is_some()
    });
    owner.expect("a new holder appeared")
}

/// The history of `process` (all its events, in time order).
fn events_of<'a>(events: &'a [Event], process: &'a str) -> impl Iterator<Item = &'a Event> + 'a {
    events.iter().filter(move |e| e.process == process)
}

// ---------------------------------------------------------------------------
// Scenarios
// ---------------------------------------------------------------------------

/// No faults: every hold must be disjoint from every other even in the strict
/// check, tokens strictly increase, the store refuses nothing, nobody loses a
/// lock, and nothing is left behind.
#[test]
fn fault_free_baseline() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let scenario = "fault_free_baseline";
    let scale = scale();
    let servers = Servers::spawn(RedisServer::spawn());
    let mut config = template(&servers, servers.lock.url());
    config.max_acquires = scale.baseline_acquires;
    config.writes_per_hold = 2;
    config.write_interval_ms = 5;
    let mut run = start(scenario, &config, scale.workers);
    // The workers stop by themselves after `max_acquires`; wait for that before the stop file.
    harness::poll_until(STOP_GUARD, Duration::from_millis(50), || {
        run.workers().into_iter().all(|w| !run.is_running(w))
    });
    let outcome = finish(
        scenario,
        &mut run,
        &servers,
        Mode::Strict,
        "none",
        Duration::from_secs(10),
    );
    assert_safe(scenario, &outcome);
    assert_clean(scenario, &outcome);
    let counts = &outcome.report.counts;
    assert_eq!(
        counts.holds,
        u64::from(scale.workers) * scale.baseline_acquires
    );
    assert_eq!(counts.writes.failed, 0, "no write is stale without faults");
    assert_eq!(counts.lost_signals, 0, "nobody loses a lock without faults");
    assert_eq!(counts.releases.failed, 0);
    assert_eq!(counts.max_concurrent_holders, 1);
    // Every token was handed to a recorded holder: the counter equals the last token.
    assert_eq!(outcome.quiesced.token_counter, Some(outcome.max_token()));
}

/// The holder is killed with SIGKILL inside its critical section (several
/// times; the slot gets a new process each time). Its lock must expire with
/// its lease and the others carry on. Conservative check: a killed holder's
/// hold counts up to the last thing it was seen doing.
#[test]
fn kill_9_of_the_holder() {
    kill_9_of_the_holder_of("kill_9_of_the_holder", Primitive::Lock);
}

/// [`kill_9_of_the_holder`] on a fair lock.
#[test]
fn fair_lock_kill_9_of_the_holder() {
    kill_9_of_the_holder_of("fair_lock_kill_9_of_the_holder", Primitive::FairLock);
}

/// [`kill_9_of_the_holder`] on the write side of a read-write lock.
#[test]
fn write_lock_kill_9_of_the_holder() {
    kill_9_of_the_holder_of("write_lock_kill_9_of_the_holder", Primitive::WriteLock);
}

/// [`kill_9_of_the_holder`] on a leader election: the leader is killed inside its critical
/// section; a standby leads once its lease has run out, no two leaders' sections overlap, and
/// the terms (the fencing tokens) increase.
#[test]
fn election_kill_9_of_the_leader() {
    kill_9_of_the_holder_of("election_kill_9_of_the_leader", Primitive::Election);
}

fn kill_9_of_the_holder_of(scenario: &str, primitive: Primitive) {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let scale = scale();
    let servers = Servers::spawn(RedisServer::spawn());
    let mut config = template(&servers, servers.lock.url());
    config.primitive = primitive;
    config.watchdog_timeout_ms = 1000;
    config.writes_per_hold = 4;
    config.write_interval_ms = 50;
    let key = LockKeyNames::for_workers(&config).lock;
    let mut run = start(scenario, &config, scale.workers);
    let mut admin = servers.admin();
    let mut killed = Vec::new();
    for _ in 0..scale.faults {
        assert_progress(scenario, &run, 0, 1);
        let holder = run
            .stop_holder(&mut admin, &key, HOLDER_GUARD, |_| true)
            .expect("found the holder inside its critical section");
        run.kill(holder.worker);
        let killed_at = now_ns();
        killed.push(holder.clone());
        run.respawn(holder.worker);
        assert_progress(scenario, &run, killed_at, scale.after_fault(&config));
    }
    let faults = format!(
        "{}× SIGKILL of the holder inside its critical section (slot restarted)",
        killed.len()
    );
    let outcome = finish(
        scenario,
        &mut run,
        &servers,
        Mode::Conservative,
        &faults,
        Duration::from_secs(10),
    );
    assert_safe(scenario, &outcome);
    assert_clean(scenario, &outcome);
    assert_eq!(run.processes_started(), scale.workers + killed.len() as u32);
    // Each killed holder's hold never ended in its history, and somebody else got the lock
    // after it (its lease expired).
    let holds = latchkey_chaos::checker::holds(&outcome.events).expect("well-formed");
    for victim in &killed {
        let hold = holds
            .iter()
            .find(|h| {
                h.process() == victim.section.process && h.fencing_token == victim.section.token
            })
            .expect("the killed hold is in the history");
        assert_eq!(hold.end, HoldEnd::EndOfHistory);
        assert!(
            holds.iter().any(|h| h.fencing_token > victim.section.token),
            "nobody got the lock after the killed holder"
        );
    }
}

/// Hand-offs under kills: a queue of waiters forms behind every holder, and each round kills,
/// with SIGKILL, two waiting workers (one may be the client the next release reserves the lock
/// for) and then the holder inside its critical section (slots restarted). A reservation for a
/// dead client must lapse (200 ms) and the lock pass on, a dead holder's lock end with its
/// lease, and no two holders may overlap or share a token. Conservative check.
#[test]
fn hand_off_kill_9_of_waiters_and_holders() {
    hand_off_kill_9_of("hand_off_kill_9_of_waiters_and_holders", Primitive::Lock);
}

/// [`hand_off_kill_9_of_waiters_and_holders`] on a fair lock (waiter timeout 2 s): a killed
/// waiter's queue entry goes stale and is dropped, and the queue moves on.
#[test]
fn fair_lock_hand_off_kill_9_of_waiters_and_holders() {
    hand_off_kill_9_of(
        "fair_lock_hand_off_kill_9_of_waiters_and_holders",
        Primitive::FairLock,
    );
}

fn hand_off_kill_9_of(scenario: &str, primitive: Primitive) {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let scale = scale();
    let servers = Servers::spawn(RedisServer::spawn());
    let mut config = template(&servers, servers.lock.url());
    config.primitive = primitive;
    config.watchdog_timeout_ms = 8000;
    config.writes_per_hold = 4;
    config.write_interval_ms = 30;
    config.acquire_wait_ms = 30_000;
    let fair = primitive == Primitive::FairLock;
    if fair {
        config.waiter_timeout_ms = Some(2000);
    }
    let mut run = start(scenario, &config, scale.workers);
    let mut admin = servers.admin();
    let mut killed = 0;
    for _ in 0..scale.faults {
        assert_progress(scenario, &run, 0, 1);
        // Two workers waiting for the lock: their last event is an acquire not answered yet.
        let mut waiting: Vec<u32> = Vec::new();
        let found = harness::poll_until(HOLDER_GUARD, Duration::from_millis(2), || {
            let holders = admin.holders(LOCK);
            waiting = (0..scale.workers)
                .filter(|&w| {
                    run.history(w)
                        .last()
                        .is_some_and(|e| e.kind == EventKind::AcquireInvoke)
                })
                .filter(|&w| run.owner(w).is_none_or(|client| !holders.contains(&client)))
                .collect();
            waiting.len() >= 2
        });
        assert!(found, "{scenario}: no two waiting workers");
        for worker in waiting.iter().take(2) {
            run.kill(*worker);
            killed += 1;
        }
        let holder = run
            .stop_holder(&mut admin, LOCK, HOLDER_GUARD, |_| true)
            .expect("found the holder inside its critical section");
        run.kill(holder.worker);
        killed += 1;
        let killed_at = now_ns();
        for worker in waiting.iter().take(2).chain([&holder.worker]) {
            run.respawn(*worker);
        }
        assert_progress(scenario, &run, killed_at, scale.after_fault(&config));
    }
    let faults = format!(
        "{}× SIGKILL of two waiting workers and of the holder (watchdog 8 s;{} slots restarted)",
        scale.faults,
        if fair { " waiter timeout 2 s;" } else { "" }
    );
    let outcome = finish(
        scenario,
        &mut run,
        &servers,
        Mode::Conservative,
        &faults,
        Duration::from_secs(20),
    );
    assert_safe(scenario, &outcome);
    assert_clean(scenario, &outcome);
    assert_eq!(run.processes_started(), scale.workers + killed);
    assert_eq!(
        outcome.report.violation_counts.duplicate_tokens,
        0,
        "{}",
        outcome.describe()
    );
}

/// Fair-lock waiters are killed with SIGKILL while queued: the first two in
/// line at once, several times (their slots get new processes). A waiter
/// that vanishes without leaving must not block the queue: its entry goes
/// stale once it has not been refreshed for the waiter timeout (2 s here),
/// every other waiter's poll drops it, and the queue moves on. Conservative
/// check (the killed processes never held the lock, but the respawned slots
/// make the history span several processes per slot).
#[test]
fn fair_lock_kill_9_of_queued_waiters() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let scenario = "fair_lock_kill_9_of_queued_waiters";
    let scale = scale();
    let servers = Servers::spawn(RedisServer::spawn());
    let mut config = template(&servers, servers.lock.url());
    config.primitive = Primitive::FairLock;
    config.waiter_timeout_ms = Some(2000);
    config.watchdog_timeout_ms = 1000;
    // Sections of about 150 ms and short think times: a queue always forms.
    config.writes_per_hold = 4;
    config.write_interval_ms = 50;
    config.acquire_wait_ms = 10_000;
    let names = LockKeyNames::for_workers(&config);
    let mut run = start(scenario, &config, scale.workers);
    let mut admin = servers.admin();
    let mut kills: Vec<(Vec<String>, u64)> = Vec::new();
    for _ in 0..scale.faults {
        assert_progress(scenario, &run, 0, 1);
        // The first two queued waiters that are workers of this run (not the holder).
        let mut victims: Vec<(u32, String)> = Vec::new();
        let found = harness::poll_until(HOLDER_GUARD, Duration::from_millis(2), || {
            let queue: Vec<String> = admin
                .query(redis::cmd("LRANGE").arg(&names.waiting[0]).arg(0).arg(1))
                .unwrap_or_default();
            let holders = admin.holders(LOCK);
            victims = queue
                .iter()
                .filter(|owner| !holders.iter().any(|h| h == harness::client_of(owner)))
                .filter_map(|owner| {
                    run.worker_of(harness::client_of(owner))
                        .map(|w| (w, owner.clone()))
                })
                .collect();
            victims.len() == 2
        });
        assert!(found, "{scenario}: no two queued waiters found");
        for (worker, _) in &victims {
            run.kill(*worker);
        }
        let killed_at = now_ns();
        for (worker, _) in &victims {
            run.respawn(*worker);
        }
        kills.push((victims.into_iter().map(|(_, o)| o).collect(), killed_at));
        assert_progress(scenario, &run, killed_at, scale.after_fault(&config));
    }
    let faults = format!(
        "{}× SIGKILL of the first two queued waiters of a fair lock (waiter timeout 2 s; slots \
         restarted)",
        kills.len()
    );
    let outcome = finish(
        scenario,
        &mut run,
        &servers,
        Mode::Conservative,
        &faults,
        Duration::from_secs(10),
    );
    assert_safe(scenario, &outcome);
    assert_clean(scenario, &outcome);
    let counts = &outcome.report.violation_counts;
    assert_eq!(counts.duplicate_tokens, 0, "{}", outcome.describe());
    for (victims, killed_at) in &kills {
        // Somebody else got the lock after the kill: the dead entries did not block the queue.
        let next = outcome
            .events
            .iter()
            .filter(|e| e.time_ns > *killed_at && matches!(e.kind, EventKind::AcquireOk { .. }))
            .map(|e| e.time_ns)
            .min()
            .unwrap_or_else(|| panic!("{scenario}: nobody acquired after the kill"));
        // Reported, not asserted: how long the queue waited for the dead waiters.
        println!(
            "{scenario}: next grant {} ms after killing {} queued waiters",
            (next - killed_at) / 1_000_000,
            victims.len()
        );
    }
}

/// The GC-pause case: the holder is stopped (SIGSTOP) inside its critical
/// section, between two writes, until its lease has run out and a successor
/// has written to the fencing store; then it is continued (SIGCONT) and
/// performs the write it was about to do with its old token. The store must
/// refuse that late write, and `lost()` must fire in the paused process.
///
/// The workers here write first and look at `lost()` afterwards (a paused
/// process cannot look in time anyway), so the late write always happens. It
/// happens while the successor holds the lock: the conservative check reports
/// that overlap, which no lease-based lock can prevent; every overlap must be
/// such a paused holder whose writes during the overlap the store refused.
#[test]
fn sigstop_of_the_holder_past_its_lease() {
    sigstop_of_the_holder_past_its_lease_of(
        "sigstop_of_the_holder_past_its_lease",
        Primitive::Lock,
    );
}

/// [`sigstop_of_the_holder_past_its_lease`] on a fair lock.
#[test]
fn fair_lock_sigstop_of_the_holder_past_its_lease() {
    sigstop_of_the_holder_past_its_lease_of(
        "fair_lock_sigstop_of_the_holder_past_its_lease",
        Primitive::FairLock,
    );
}

/// [`sigstop_of_the_holder_past_its_lease`] on the write side of a read-write
/// lock.
#[test]
fn write_lock_sigstop_of_the_holder_past_its_lease() {
    sigstop_of_the_holder_past_its_lease_of(
        "write_lock_sigstop_of_the_holder_past_its_lease",
        Primitive::WriteLock,
    );
}

/// [`sigstop_of_the_holder_past_its_lease`] on a leader election: the paused leader's late
/// write carries its old term and is refused, it hears `lost()`, and its resignation is refused
/// without touching the new leader.
#[test]
fn election_sigstop_of_the_leader_past_its_lease() {
    sigstop_of_the_holder_past_its_lease_of(
        "election_sigstop_of_the_leader_past_its_lease",
        Primitive::Election,
    );
}

fn sigstop_of_the_holder_past_its_lease_of(scenario: &str, primitive: Primitive) {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let scale = scale();
    let servers = Servers::spawn(RedisServer::spawn());
    let mut config = template(&servers, servers.lock.url());
    config.primitive = primitive;
    config.watchdog_timeout_ms = 1000;
    config.writes_per_hold = 6;
    config.write_interval_ms = 100;
    config.check_lost_before_write = false;
    let writes = config.writes_per_hold;
    let key = LockKeyNames::for_workers(&config).lock;
    let mut run = start(scenario, &config, scale.workers);
    let mut admin = servers.admin();
    let mut zombies: Vec<(StoppedHolder, u64)> = Vec::new();
    for _ in 0..scale.faults {
        assert_progress(scenario, &run, 0, 1);
        // Between writes (not in the middle of one), with at least one write to go.
        let holder = run
            .stop_holder(&mut admin, &key, HOLDER_GUARD, |cs| {
                cs.writes_started < writes
                    && matches!(cs.last, EventKind::AcquireOk { .. } | EventKind::WriteOk)
            })
            .expect("found the holder between two writes");
        // Past its lease: a successor got the lock and wrote with a newer token.
        let overtaken = harness::poll_until(PROGRESS_GUARD, Duration::from_millis(10), || {
            servers.store_token() > holder.section.token
        });
        assert!(overtaken, "no successor wrote while the holder was stopped");
        let resumed = now_ns();
        run.continue_process(holder.worker);
        zombies.push((holder, resumed));
        assert_progress(scenario, &run, resumed, scale.after_fault(&config));
    }
    let faults = format!(
        "{}× SIGSTOP of the holder until a successor wrote, then SIGCONT",
        zombies.len()
    );
    let outcome = finish(
        scenario,
        &mut run,
        &servers,
        Mode::Conservative,
        &faults,
        Duration::from_secs(10),
    );
    assert_clean(scenario, &outcome);
    let counts = &outcome.report.violation_counts;
    assert_eq!(counts.stale_writes_accepted, 0, "{}", outcome.describe());
    assert_eq!(counts.duplicate_tokens, 0, "{}", outcome.describe());
    assert_eq!(counts.token_inversions, 0, "{}", outcome.describe());
    for (zombie, resumed) in &zombies {
        let mine: Vec<&Event> = events_of(&outcome.events, &zombie.section.process)
            .filter(|e| e.time_ns >= *resumed)
            .collect();
        // Its next write carried the old token and was refused …
        let late = mine
            .iter()
            .position(|e| matches!(&e.kind, EventKind::WriteInvoke { token, .. } if *token == zombie.section.token))
            .unwrap_or_else(|| panic!("the paused holder made no late write: {mine:#?}"));
        let refused = mine[late..]
            .iter()
            .find(|e| e.op == mine[late].op && e.kind != mine[late].kind)
            .map(|e| &e.kind);
        assert_eq!(refused, Some(&EventKind::WriteRejected), "{mine:#?}");
        // … lost() fired …
        assert!(
            mine.iter().any(|e| e.kind == EventKind::LostSignal),
            "lost() did not fire after the pause: {mine:#?}"
        );
        // … and its unlock was refused without touching the successor's lock.
        assert!(
            mine.iter().any(|e| matches!(&e.kind, EventKind::ReleaseFail { reason } if reason.contains("not held"))),
            "the stale unlock was not refused: {mine:#?}"
        );
    }
    // Every overlap is a paused holder's late (refused) write during a successor's hold.
    for violation in &outcome.report.violations {
        let ViolationKind::OverlappingHolds { .. } = violation.kind else {
            continue;
        };
        let involves_zombie = violation.events.iter().any(|e| {
            zombies
                .iter()
                .any(|(z, _)| e.process == z.section.process && e.time_ns >= z.section.acquired_ns)
        });
        assert!(
            involves_zombie,
            "an overlap without a paused holder: {}",
            violation.description
        );
    }
    assert!(outcome.lost_signals() >= zombies.len() as u64);
}

/// Injects a server-side stall in `fault` (SIGSTOP of redis-server, or CLIENT
/// PAUSE) right after a new holder got the lock, for longer than the lease
/// plus two seconds. The holder must be told `lost()` while the server
/// stalls; its successor can only be granted the lock after the stall, so
/// even the strict check must find nothing.
fn server_stall_scenario(
    scenario: &str,
    fault_name: &str,
    mut fault: impl FnMut(&Servers, Duration),
) {
    let scale = scale();
    let servers = Servers::spawn(RedisServer::spawn());
    let mut config = template(&servers, servers.lock.url());
    config.watchdog_timeout_ms = 1000;
    config.command_timeout_ms = 500;
    config.writes_per_hold = 10;
    config.write_interval_ms = 250;
    let stall = Duration::from_millis(3500);
    let mut run = start(scenario, &config, scale.workers);
    let mut admin = servers.admin();
    let mut stalled_holders = Vec::new();
    for _ in 0..scale.faults {
        assert_progress(scenario, &run, 0, 1);
        let owner = wait_for_fresh_holder(&mut admin);
        let started = now_ns();
        fault(&servers, stall);
        stalled_holders.push((owner, started, now_ns()));
        assert_progress(scenario, &run, now_ns(), scale.after_fault(&config));
    }
    let faults = format!(
        "{}× {fault_name} for {} ms (lease 1000 ms) right after a new holder got the lock",
        stalled_holders.len(),
        stall.as_millis()
    );
    let outcome = finish(
        scenario,
        &mut run,
        &servers,
        Mode::Strict,
        &faults,
        Duration::from_secs(10),
    );
    assert_safe(scenario, &outcome);
    assert_clean(scenario, &outcome);
    assert_told_lost(scenario, &outcome, &stalled_holders);
}

/// Every hold of the given owners that was open during their stall
/// (`(owner, stall start, stall end)`) must have ended with `lost()`, and at
/// least one such hold must exist.
fn assert_told_lost(scenario: &str, outcome: &Outcome, stalled: &[(String, u64, u64)]) {
    let holds = latchkey_chaos::checker::holds(&outcome.events).expect("well-formed");
    let mut told = 0;
    for (owner, started, ended) in stalled {
        for hold in holds.iter().filter(|h| h.process() == owner) {
            let open_at_start = hold.acquire_ok.time_ns <= *ended
                && hold
                    .end_event
                    .as_ref()
                    .is_none_or(|e| e.time_ns >= *started);
            if open_at_start {
                assert_eq!(
                    hold.end,
                    HoldEnd::Lost,
                    "{scenario}: the holder {owner} was not told that it lost the lock\n{}",
                    outcome.describe()
                );
                told += 1;
            }
        }
    }
    assert!(
        told > 0,
        "{scenario}: no holder was caught by a stall\n{}",
        outcome.describe()
    );
    assert!(outcome.lost_signals() >= told);
}

/// redis-server is stopped with SIGSTOP (it keeps its connections but answers
/// nothing) for 3.5 s under a held lock.
#[test]
fn sigstop_of_redis_server() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    server_stall_scenario(
        "sigstop_of_redis_server",
        "SIGSTOP of redis-server",
        |servers, stall| {
            servers.lock.pause_process();
            std::thread::sleep(stall);
            servers.lock.resume_process();
        },
    );
}

/// `CLIENT PAUSE 3500 WRITE` under a held lock (what a failover does): every
/// script call waits, reads go on.
#[test]
fn client_pause() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    server_stall_scenario("client_pause", "CLIENT PAUSE WRITE", |servers, stall| {
        let mut admin = servers.admin();
        let _: () = admin
            .query(
                redis::cmd("CLIENT")
                    .arg("PAUSE")
                    .arg(stall.as_millis() as u64)
                    .arg("WRITE"),
            )
            .expect("CLIENT PAUSE");
        std::thread::sleep(stall);
    });
}

/// redis-server with `appendonly yes` / `appendfsync always` is killed (-9) and
/// restarted under a held lock. The lock and the fencing counter survive, so
/// even the strict check must find nothing.
#[test]
fn redis_restart_with_aof() {
    redis_restart_with_aof_of("redis_restart_with_aof", Primitive::Lock);
}

/// [`redis_restart_with_aof`] on a fair lock: its queue and deadlines are on disk too.
#[test]
fn fair_lock_redis_restart_with_aof() {
    redis_restart_with_aof_of("fair_lock_redis_restart_with_aof", Primitive::FairLock);
}

/// [`redis_restart_with_aof`] on the write side of a read-write lock.
#[test]
fn write_lock_redis_restart_with_aof() {
    redis_restart_with_aof_of("write_lock_redis_restart_with_aof", Primitive::WriteLock);
}

/// [`redis_restart_with_aof`] on a leader election: the leader key, the term counter and the
/// change log are on disk.
#[test]
fn election_redis_restart_with_aof() {
    redis_restart_with_aof_of("election_redis_restart_with_aof", Primitive::Election);
}

fn redis_restart_with_aof_of(scenario: &str, primitive: Primitive) {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let scale = scale();
    let mut servers = Servers::spawn(RedisServer::builder().appendonly(true).spawn());
    let mut config = template(&servers, servers.lock.url());
    config.primitive = primitive;
    config.watchdog_timeout_ms = 5000;
    config.command_timeout_ms = 1000;
    config.writes_per_hold = 4;
    config.write_interval_ms = 50;
    let key = LockKeyNames::for_workers(&config).lock;
    let mut run = start(scenario, &config, scale.workers);
    let mut admin = servers.admin();
    let mut survived = 0;
    for _ in 0..scale.faults {
        assert_progress(scenario, &run, 0, 1);
        let owner = wait_for_holder_of(&mut admin, &key);
        servers.lock.restart();
        let restarted = now_ns();
        // The lock was on disk: unless its holder released it in the meantime, it is back.
        if admin.holders(&key).contains(&owner) {
            survived += 1;
        }
        assert_progress(scenario, &run, restarted, scale.after_fault(&config));
    }
    let faults = format!(
        "{}× kill -9 and restart of redis-server (appendfsync always) under a held lock; the lock was back after {survived} of them",
        scale.faults
    );
    let outcome = finish(
        scenario,
        &mut run,
        &servers,
        Mode::Strict,
        &faults,
        Duration::from_secs(15),
    );
    assert_safe(scenario, &outcome);
    assert_clean(scenario, &outcome);
}

/// THE RUN THAT MUST BE FLAGGED: redis-server without persistence is restarted
/// under a held lock. The restart forgets the lock *and the fencing counter*:
/// a successor gets the lock while the old holder may still act. The checker
/// must report the overlapping holds (a checker that flags nothing here is
/// broken). The tokens do not start again: the next one is at least the
/// server's clock in microseconds, so they still only go up, and the fencing
/// store refuses the old holder's writes once the successor wrote.
#[test]
fn redis_restart_without_persistence_is_flagged() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let scenario = "redis_restart_without_persistence_is_flagged";
    let scale = scale();
    let mut servers = Servers::spawn(RedisServer::spawn());
    let mut config = template(&servers, servers.lock.url());
    config.watchdog_timeout_ms = 3000;
    config.writes_per_hold = 6;
    config.write_interval_ms = 100;
    // After the restart the store refuses writes of holders that still hold the lock: do not
    // wait long for a lost() that will (rightly) not come.
    config.lost_wait_ms = 300;
    let mut run = start(scenario, &config, scale.workers);
    let mut admin = servers.admin();
    let mut restarts = 0;
    for _ in 0..scale.faults.min(3) {
        assert_progress(scenario, &run, 0, 5);
        wait_for_holder(&mut admin);
        servers.lock.restart();
        restarts += 1;
        assert_progress(scenario, &run, now_ns(), scale.after_fault(&config));
    }
    let faults = format!(
        "{restarts}× kill -9 and restart of redis-server WITHOUT persistence under a held lock"
    );
    let outcome = finish(
        scenario,
        &mut run,
        &servers,
        Mode::Strict,
        &faults,
        Duration::from_secs(10),
    );
    let counts = &outcome.report.violation_counts;
    assert!(
        counts.overlapping_holds > 0,
        "the checker must flag the holds that overlapped after the restart\n{}",
        outcome.describe()
    );
    assert_eq!(
        counts.duplicate_tokens + counts.token_inversions,
        0,
        "tokens must keep increasing across a restart that forgot the counter\n{}",
        outcome.describe()
    );
    assert_eq!(counts.stale_writes_accepted, 0, "{}", outcome.describe());
    assert!(
        outcome.report.counts.writes.failed > 0,
        "the fencing store must refuse the successor's writes\n{}",
        outcome.describe()
    );
    assert!(!outcome.report.is_safe());
    let leftovers = outcome
        .report
        .leftovers
        .as_ref()
        .expect("leftovers checked");
    assert!(leftovers.is_clean(), "{}", outcome.describe());
}

/// Workers reach the server through a fault proxy; `fault` is applied to it
/// `scale.faults` times, each followed by recovery. `fault` returns the owner
/// that must be told `lost()` (with the fault's start and end), if any.
fn proxy_scenario(
    scenario: &str,
    primitive: Primitive,
    description: &str,
    watchdog_ms: u64,
    write_interval_ms: u64,
    mut fault: impl FnMut(&FaultProxy, &mut Admin) -> Option<(String, u64, u64)>,
) {
    let scale = scale();
    let servers = Servers::spawn(RedisServer::spawn());
    let proxy = FaultProxy::start(&servers.lock.addr());
    let mut config = template(&servers, proxy.url());
    config.primitive = primitive;
    config.watchdog_timeout_ms = watchdog_ms;
    config.command_timeout_ms = 1000;
    config.writes_per_hold = 10;
    config.write_interval_ms = write_interval_ms;
    let mut run = start(scenario, &config, scale.workers);
    let mut admin = servers.admin();
    let mut stalled = Vec::new();
    for _ in 0..scale.faults {
        assert_progress(scenario, &run, 0, 1);
        stalled.extend(fault(&proxy, &mut admin));
        assert_progress(scenario, &run, now_ns(), scale.after_fault(&config));
    }
    let faults = format!("{}× {description}", scale.faults);
    let outcome = finish(
        scenario,
        &mut run,
        &servers,
        Mode::Strict,
        &faults,
        Duration::from_secs(10),
    );
    assert_safe(scenario, &outcome);
    assert_clean(scenario, &outcome);
    if !stalled.is_empty() {
        assert_told_lost(scenario, &outcome, &stalled);
    }
}

/// Every chunk between clients and server is delayed by 150 ms (each way) for
/// 3 s under a held lock; leases (2 s) are renewed in time.
#[test]
fn proxy_delay() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    proxy_scenario(
        "proxy_delay",
        Primitive::Lock,
        "150 ms delay each way for 3 s (proxy) under a held lock, lease 2000 ms",
        2000,
        50,
        |proxy, admin| {
            wait_for_holder(admin);
            proxy.set_delay(Duration::from_millis(150));
            std::thread::sleep(Duration::from_secs(3));
            proxy.set_delay(Duration::ZERO);
            None
        },
    );
}

/// Every client connection (commands and pub/sub) is dropped, three times in a
/// row 500 ms apart, under a held lock.
#[test]
fn proxy_drop_connections() {
    proxy_drop_connections_of("proxy_drop_connections", Primitive::Lock);
}

/// [`proxy_drop_connections`] on a fair lock: replies and wake-ups lost with the
/// connections must neither strand a hold nor leave the queue stuck.
#[test]
fn fair_lock_proxy_drop_connections() {
    proxy_drop_connections_of("fair_lock_proxy_drop_connections", Primitive::FairLock);
}

/// [`proxy_drop_connections`] on the write side of a read-write lock.
#[test]
fn write_lock_proxy_drop_connections() {
    proxy_drop_connections_of("write_lock_proxy_drop_connections", Primitive::WriteLock);
}

fn proxy_drop_connections_of(scenario: &str, primitive: Primitive) {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    proxy_scenario(
        scenario,
        primitive,
        "3 drops of every client connection 500 ms apart (proxy) under a held lock, lease 2000 ms",
        2000,
        50,
        |proxy, admin| {
            wait_for_holder(admin);
            for _ in 0..3 {
                proxy.drop_connections();
                std::thread::sleep(Duration::from_millis(500));
            }
            None
        },
    );
}

/// Nothing gets through for 3.5 s (lease 1 s) right after a new holder got
/// the lock; the holder must be told `lost()`, and since every client is
/// behind the same black hole nobody can take the lock before it lifts.
#[test]
fn proxy_blackhole() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    proxy_scenario(
        "proxy_blackhole",
        Primitive::Lock,
        "3.5 s black hole (proxy) right after a new holder got the lock, lease 1000 ms",
        1000,
        250,
        |proxy, admin| {
            let owner = wait_for_fresh_holder(admin);
            let started = now_ns();
            proxy.blackhole(true);
            std::thread::sleep(Duration::from_millis(3500));
            proxy.blackhole(false);
            Some((owner, started, now_ns()))
        },
    );
}

/// Waits until one owner holds the lock on every one of `admins`' nodes
/// (a RedLock hold granted by all of them); returns it.
fn wait_for_holder_on_all(admins: &mut [Admin]) -> String {
    let mut owner = None;
    let found = harness::poll_until(HOLDER_GUARD, Duration::from_millis(2), || {
        let mut common: Option<Vec<String>> = None;
        for admin in admins.iter_mut() {
            let holders = admin.holders(LOCK);
            common = Some(match common {
                None => holders,
                Some(c) => c.into_iter().filter(|h| holders.contains(h)).collect(),
            });
        }
        owner = common.and_then(|c| c.into_iter().next());
        owner.is_some()
    });
    assert!(found, "no RedLock hold granted by every node");
    owner.expect("found")
}

/// RedLock over three servers without persistence: one node is killed under a
/// hold granted by all three (the others keep the quorum), later restarted
/// empty; then another node is killed and restarted empty at once under a
/// hold granted by all three. The holder keeps a majority each time, so even
/// the strict check must find nothing, and fencing tokens keep increasing.
#[test]
fn redlock_one_node_killed_and_one_restarted_empty() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let scenario = "redlock_one_node_killed_and_one_restarted_empty";
    let scale = scale();
    let mut nodes = latchkey_test_support::RedisServers::spawn(3);
    let store = RedisServer::spawn();
    let servers = Servers {
        lock: RedisServer::spawn(), // unused by the workers; keeps `Servers` uniform
        store,
    };
    let mut config = template(&servers, String::new());
    config.redlock_urls = nodes.urls();
    // Long enough that a loaded machine does not make a node miss a grant: the restarts below
    // rely on the holder holding every node.
    config.redlock_node_timeout_ms = 1000;
    config.watchdog_timeout_ms = 2000;
    config.writes_per_hold = 4;
    config.write_interval_ms = 50;
    let mut run = start(scenario, &config, scale.workers.min(5));
    let mut admins: Vec<Admin> = nodes.iter().map(|n| Admin::new(n.client())).collect();
    let rounds = (scale.faults / 2).max(1);
    let mut faults = Vec::new();
    for _ in 0..rounds {
        // One node killed under a hold granted by all three …
        assert_progress(scenario, &run, 0, 1);
        wait_for_holder_on_all(&mut admins);
        nodes[0].kill();
        faults.push("kill node 0");
        assert_progress(scenario, &run, now_ns(), scale.after_fault(&config));
        // … and restarted empty after more than a lease.
        std::thread::sleep(Duration::from_millis(config.watchdog_timeout_ms + 500));
        nodes[0].restart();
        faults.push("restart node 0 empty");
        assert_progress(scenario, &run, now_ns(), scale.after_fault(&config));
        // Another node restarted empty at once under a hold granted by all three.
        wait_for_holder_on_all(&mut admins);
        nodes[1].restart();
        faults.push("kill -9 + immediate empty restart of node 1");
        assert_progress(scenario, &run, now_ns(), scale.after_fault(&config));
    }
    let description = format!(
        "RedLock over 3 nodes: {}× ({})",
        rounds,
        faults[..3].join(", then ")
    );
    run.stop_workers();
    let statuses = run
        .wait(STOP_GUARD)
        .unwrap_or_else(|e| panic!("{scenario}: {e}"));
    for (worker, status) in &statuses {
        assert!(
            status.success(),
            "worker {worker} failed:\n{}",
            run.log(*worker)
        );
    }
    let events = run.events();
    let report = check(&events, &CheckOptions::default()).expect("well-formed history");
    let summaries = run.summaries();
    let mut leftovers = latchkey_chaos::Leftovers::default();
    let mut accounting = Vec::new();
    for (i, admin) in admins.iter_mut().enumerate() {
        let q = quiesce(
            admin,
            &LockKeyNames::new(LOCK),
            Duration::from_secs(10),
            &[],
        );
        accounting.push(format!("node {i}: {}", q.accounting()));
        let l = q.leftovers;
        leftovers
            .lock_keys
            .extend(l.lock_keys.into_iter().map(|k| format!("node {i}: {k}")));
        leftovers.queue_entries.extend(
            l.queue_entries
                .into_iter()
                .map(|k| format!("node {i}: {k}")),
        );
        leftovers.subscriptions.extend(
            l.subscriptions
                .into_iter()
                .map(|k| format!("node {i}: {k}")),
        );
        for (owner, n) in l.hold_counts {
            leftovers
                .hold_counts
                .insert(format!("node {i}: {owner}"), n);
        }
    }
    let empty = quiesce(
        &mut servers.admin(),
        &LockKeyNames::new(LOCK),
        Duration::ZERO,
        &summaries,
    )
    .leftovers;
    leftovers.subscriptions.extend(empty.subscriptions);
    leftovers.hold_counts.extend(empty.hold_counts);
    let report = report.with_leftovers(leftovers.clone());
    let command = command(scenario);
    let row = markdown_row(scenario, &report, &description, &command);
    harness::publish_row(run.dir(), &row, &accounting.join("\n"));
    assert!(
        report.is_safe(),
        "{:?}\n{:#?}",
        report.violation_counts,
        report.violations
    );
    assert!(
        leftovers.is_clean(),
        "{}\n{}",
        leftovers.summary(),
        accounting.join("\n")
    );
    assert!(report.counts.holds > 0);
}

/// A primary with one replica behind three sentinels; the workers connect
/// through the sentinels (`redis+sentinel://`). The primary is killed (-9)
/// under a held lock and a sentinel promotes the replica. Acquires wait for
/// the replica (`ReplicaSync::Auto`, i.e. `WAIT 1`), so the lock and its
/// fencing counter survive the failover: even the strict check must find
/// nothing. (Without that wait, an acquire not yet replicated is lost with the
/// primary, like the restart without persistence.)
#[test]
fn sentinel_failover() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let scenario = "sentinel_failover";
    let scale = scale();
    let mut group = SentinelGroup::spawn(1, 3);
    let url = group.url();
    let servers = Servers::spawn(RedisServer::spawn()); // only the store is used
    let mut config = template(&servers, url);
    config.watchdog_timeout_ms = 10_000;
    config.command_timeout_ms = 1000;
    config.writes_per_hold = 4;
    config.write_interval_ms = 50;
    let mut run = start(scenario, &config, scale.workers.min(5));
    let primary_admin = |group: &SentinelGroup| {
        let addr = group.current_primary_addr();
        let server = group
            .servers()
            .iter()
            .find(|s| s.addr() == addr)
            .expect("the primary is in the group");
        Admin::new(server.client())
    };
    let failovers = if soak() { 4 } else { 1 };
    for i in 0..failovers {
        assert_progress(scenario, &run, 0, 1);
        if i > 0 {
            // Bring the killed primary back; the sentinels make it a replica of the new one.
            let dead = (0..group.servers().len())
                .find(|&j| !group.servers()[j].is_running())
                .expect("a killed server");
            group.server_mut(dead).restart();
            group
                .server_mut(dead)
                .wait_until_synced(Duration::from_secs(60));
        }
        let mut admin = primary_admin(&group);
        wait_for_holder(&mut admin);
        group.kill_primary();
        group.wait_for_failover(Duration::from_secs(90));
        assert_progress(scenario, &run, now_ns(), scale.after_fault(&config));
    }
    let faults = format!(
        "{failovers}× kill -9 of the Sentinel-monitored primary under a held lock, replica promoted (acquires wait for 1 replica)"
    );
    let mut admin = primary_admin(&group);
    let settle = Duration::from_millis(config.watchdog_timeout_ms + 5000);
    let outcome = finish_with(
        scenario,
        &mut run,
        &mut admin,
        Mode::Strict,
        &faults,
        settle,
    );
    assert_safe(scenario, &outcome);
    assert_clean(scenario, &outcome);
}

/// Kills and restarts up to `count` workers that are not inside a critical
/// section (each is stopped first and its history read, so no hold is cut
/// short): the restarted processes are fresh clients, which ask the
/// sentinels for the primary anew.
fn restart_idle_workers(run: &mut Run, count: usize) {
    let mut restarted = 0;
    for worker in run.workers() {
        if restarted == count {
            break;
        }
        if !run.is_running(worker) {
            continue;
        }
        run.stop_process(worker);
        if harness::critical_section(&run.history(worker)).is_some() {
            run.continue_process(worker);
            continue;
        }
        run.kill(worker);
        run.respawn(worker);
        restarted += 1;
    }
}

/// A primary with one replica behind three sentinels; the workers connect
/// through the sentinels with the default settings. `SENTINEL FAILOVER`
/// promotes the replica while the old primary keeps running and taking
/// writes until the sentinels reconfigure it (seconds later); right after
/// each failover two idle workers are restarted, so fresh clients lock on the
/// new primary while the others were connected to the old one. No two
/// holders at any moment (strict check): a grant on the demoted primary is
/// never taken as a hold (auto replica sync refuses a primary that lost its
/// replicas, and clients follow the sentinels' `+switch-master`).
#[test]
fn sentinel_manual_failover_split_brain() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let scenario = "sentinel_manual_failover_split_brain";
    let group = SentinelGroup::spawn(1, 3);
    let url = group.url();
    let servers = Servers::spawn(RedisServer::spawn()); // only the store is used
    let mut config = template(&servers, url);
    config.watchdog_timeout_ms = 5_000;
    config.command_timeout_ms = 1000;
    config.writes_per_hold = 4;
    config.write_interval_ms = 25;
    let mut run = start(scenario, &config, 4);
    let failovers = if soak() { 12 } else { 6 };
    assert_progress(scenario, &run, 0, 1);
    for _ in 0..failovers {
        let since = now_ns();
        let (old, _new) = group.manual_failover(Duration::from_secs(60));
        restart_idle_workers(&mut run, 2);
        assert_progress(scenario, &run, since, 3);
        group.wait_demoted(&old, Duration::from_secs(90));
    }
    let faults = format!(
        "{failovers}× SENTINEL FAILOVER with the old primary running, two fresh clients after each"
    );
    let addr = group.current_primary_addr();
    let primary = group
        .servers()
        .iter()
        .find(|s| s.addr() == addr)
        .expect("the primary is in the group");
    let mut admin = Admin::new(primary.client());
    let settle = Duration::from_millis(config.watchdog_timeout_ms + 5000);
    let outcome = finish_with(
        scenario,
        &mut run,
        &mut admin,
        Mode::Strict,
        &faults,
        settle,
    );
    assert_safe(scenario, &outcome);
    assert_clean(scenario, &outcome);
    drop(group);
}

/// The scheduler: three nodes run one job every second, each run a critical section of four
/// fenced writes 100 ms apart whose values name the occurrence. Each round kills a runner with
/// SIGKILL during a run (its slot restarted), then stops another with SIGSTOP between two
/// writes until a node retried its occurrence and wrote, and continues it. The retries must
/// get higher tokens than the attempts before them, no two runs may overlap even in the
/// conservative check (a continued runner notices its loss before it writes again), no
/// occurrence may complete twice, and the job must keep running.
#[test]
fn job_kill_9_and_sigstop_of_runners() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let scenario = "job_kill_9_and_sigstop_of_runners";
    let servers = Servers::spawn(RedisServer::spawn());
    let mut config = template(&servers, servers.lock.url());
    config.primitive = Primitive::Job;
    config.watchdog_timeout_ms = 1000;
    config.job_interval_ms = 1000;
    config.writes_per_hold = 4;
    config.write_interval_ms = 100;
    let writes = config.writes_per_hold;
    // Within this of its last write a runner is provably asleep before its next one.
    let asleep_ns = config.write_interval_ms * 1_000_000 / 2;
    let rounds = if soak() { 8 } else { 2 };
    let run_key = LockKeyNames::for_workers(&config).lock;
    let mut run = start(scenario, &config, 3);
    let mut admin = servers.admin();
    let mut killed: Vec<StoppedHolder> = Vec::new();
    let mut paused: Vec<(StoppedHolder, u64)> = Vec::new();
    for _ in 0..rounds {
        assert_progress(scenario, &run, 0, 1);
        // Killed during a run that wrote once (so that its writes name the occurrence).
        let victim = run
            .stop_holder(&mut admin, &run_key, HOLDER_GUARD, |cs| {
                cs.writes_started >= 1
            })
            .expect("found a runner inside its run");
        run.kill(victim.worker);
        let killed_at = now_ns();
        run.respawn(victim.worker);
        killed.push(victim);
        assert_progress(scenario, &run, killed_at, 2);
        // Stopped while it sleeps between two writes, until another node retried the
        // occurrence past its lease and wrote with a newer token.
        let victim = run
            .stop_holder(&mut admin, &run_key, HOLDER_GUARD, |cs| {
                cs.last == EventKind::WriteOk
                    && cs.writes_started < writes
                    && now_ns() < cs.last_ns + asleep_ns
            })
            .expect("found a runner between two writes");
        let overtaken = harness::poll_until(PROGRESS_GUARD, Duration::from_millis(10), || {
            servers.store_token() > victim.section.token
        });
        assert!(
            overtaken,
            "{scenario}: nobody retried the stopped runner's occurrence"
        );
        let resumed = now_ns();
        run.continue_process(victim.worker);
        paused.push((victim, resumed));
        assert_progress(scenario, &run, resumed, 2);
    }
    // The job runs on after the faults.
    assert_progress(scenario, &run, now_ns(), 5);
    let faults = format!(
        "{rounds}× (SIGKILL of a runner during a run, slot restarted; SIGSTOP of a runner \
         between two writes until another node retried its occurrence, then SIGCONT); 3 nodes, \
         job every 1 s, lease 1000 ms"
    );
    let outcome = finish(
        scenario,
        &mut run,
        &servers,
        Mode::Conservative,
        &faults,
        Duration::from_secs(10),
    );
    assert_safe(scenario, &outcome);
    assert_clean(scenario, &outcome);
    assert_eq!(run.processes_started(), 3 + killed.len() as u32);

    let holds = latchkey_chaos::checker::holds(&outcome.events).expect("well-formed");
    // The occurrence each hold ran, from its writes.
    let due_of = |hold: &latchkey_chaos::checker::Hold| -> Option<u64> {
        events_of(&outcome.events, hold.process())
            .filter(|e| e.time_ns >= hold.acquire_ok.time_ns)
            .find_map(|e| match &e.kind {
                EventKind::WriteInvoke { token, value } if *token == hold.fencing_token => {
                    latchkey_chaos::worker::job_due_of(value)
                }
                _ => None,
            })
    };
    let mut runs_of: std::collections::BTreeMap<u64, Vec<&latchkey_chaos::checker::Hold>> =
        std::collections::BTreeMap::new();
    for hold in &holds {
        if let Some(due) = due_of(hold) {
            runs_of.entry(due).or_default().push(hold);
        }
    }
    // Finished runs ran distinct occurrences; the runs of one occurrence got increasing tokens.
    for (due, runs) in &runs_of {
        assert_eq!(
            due % config.job_interval_ms,
            0,
            "{scenario}: due time {due}"
        );
        let finished = runs.iter().filter(|h| h.end == HoldEnd::Release).count();
        assert!(
            finished <= 1,
            "{scenario}: occurrence {due} finished {finished} times\n{}",
            outcome.describe()
        );
        let tokens: Vec<u64> = runs.iter().map(|h| h.fencing_token).collect();
        assert!(
            tokens.windows(2).all(|w| w[0] < w[1]),
            "{scenario}: the runs of occurrence {due} got the tokens {tokens:?}"
        );
    }
    // Every victim's occurrence was retried with a higher token and finished.
    let victims = killed.iter().chain(paused.iter().map(|(v, _)| v));
    for victim in victims {
        let hold = holds
            .iter()
            .find(|h| {
                h.process() == victim.section.process && h.fencing_token == victim.section.token
            })
            .expect("the victim's run is in the history");
        let due = due_of(hold).expect("the victim's run wrote");
        let runs = &runs_of[&due];
        assert!(
            runs.iter().any(|h| h.fencing_token > hold.fencing_token),
            "{scenario}: occurrence {due} was not retried after its runner stopped"
        );
        assert!(
            runs.iter().any(|h| h.end == HoldEnd::Release),
            "{scenario}: occurrence {due} never finished"
        );
    }
    for victim in &killed {
        let hold = holds
            .iter()
            .find(|h| h.fencing_token == victim.section.token)
            .expect("in the history");
        assert_eq!(hold.end, HoldEnd::EndOfHistory);
    }
    // A continued runner heard lost() and wrote nothing more.
    for (victim, resumed) in &paused {
        let hold = holds
            .iter()
            .find(|h| h.fencing_token == victim.section.token)
            .expect("in the history");
        assert_eq!(
            hold.end,
            HoldEnd::Lost,
            "{scenario}: the continued runner was not told it lost its run\n{}",
            outcome.describe()
        );
        let late_writes = events_of(&outcome.events, &victim.section.process)
            .filter(|e| e.time_ns >= *resumed)
            .filter(|e| matches!(&e.kind, EventKind::WriteInvoke { token, .. } if *token == victim.section.token))
            .count();
        assert_eq!(
            late_writes, 0,
            "{scenario}: the continued runner wrote again"
        );
    }
    // Progress, and no occurrence lost: every occurrence from the first finished one to the
    // last one finished, or was skipped as Overlap::Skip says (due while a stopped runner's
    // lease lasted), as the job's `skipped` count says.
    let finished: Vec<u64> = runs_of
        .iter()
        .filter(|(_, runs)| runs.iter().any(|h| h.end == HoldEnd::Release))
        .map(|(due, _)| *due)
        .collect();
    let span = (finished.last().unwrap_or(&0) - finished.first().unwrap_or(&0))
        / config.job_interval_ms
        + 1;
    let skipped: Option<u64> = servers
        .admin()
        .query(redis::cmd("HGET").arg(&outcome.names.token).arg("skipped"))
        .unwrap_or(None);
    let skipped = skipped.unwrap_or(0);
    println!(
        "{scenario}: {} of {span} occurrences finished, {skipped} skipped; {} runs",
        finished.len(),
        holds.len()
    );
    assert!(
        finished.len() >= 8 && finished.len() as u64 + skipped >= span,
        "{scenario}: {} of {span} occurrences finished, {skipped} skipped\n{}",
        finished.len(),
        outcome.describe()
    );
}
