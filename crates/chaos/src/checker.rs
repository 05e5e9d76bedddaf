//! The mutual-exclusion checker: turns a merged history into a [`Report`].
//!
//! # Holds
//!
//! A *hold* belongs to one worker process (identified by worker id and
//! process id, i.e. lock owner). It starts at the time of an
//! [`EventKind::AcquireOk`] and ends at the first later event of the same
//! process that is a [`EventKind::ReleaseInvoke`] or a
//! [`EventKind::LostSignal`]; if there is none (the process died or the run
//! stopped), the hold is open until the end of the history. A process never
//! has two holds at once: a second `AcquireOk` while a hold is open makes the
//! history malformed.
//!
//! Which part of a hold is compared with other holds depends on the
//! [`Mode`]:
//!
//! * [`Mode::Strict`]: the whole hold, `[AcquireOk, end]`, open-ended if the
//!   hold never ended. Right for runs without pauses or kills.
//! * [`Mode::Conservative`]: the *proven* hold `[AcquireOk, last proof]`.
//!   A proof of life is an event of the holding process recorded after the
//!   `AcquireOk` and no later than the hold's end that shows the process was
//!   executing the critical section: a [`EventKind::WriteInvoke`],
//!   [`EventKind::WriteOk`] or [`EventKind::WriteRejected`], or the
//!   [`EventKind::ReleaseInvoke`] ending the hold. A
//!   [`EventKind::LostSignal`] is *not* a proof: it is the library reporting
//!   (possibly right after the process was resumed from a pause) that the
//!   lock is gone, not an action taken inside the critical section. With no
//!   proof, the proven hold is the single instant of the `AcquireOk`. So a
//!   process that was paused or killed inside its critical section counts
//!   only up to the last thing it was seen doing there.
//!
//! Two intervals `[s1, e1]` and `[s2, e2]` overlap iff `s1 < e2` and
//! `s2 < e1` (an open end is +infinity); intervals that merely touch do not
//! overlap. Holds of different processes (including two processes of the
//! same worker slot, before and after a restart) that overlap are a
//! violation.
//!
//! # Fencing tokens
//!
//! Independently of the mode: every `AcquireOk` token must be unique, and if
//! hold A's `AcquireOk` happened strictly before hold B's `AcquireInvoke`,
//! then `token(A) < token(B)`. For each hold B the checker reports at most
//! one inversion, with the largest-token witness A.
//!
//! # Fencing store
//!
//! A write is accepted at some instant between its `WriteInvoke` and its
//! `WriteOk`. If an accepted write X with token `t'` completed (`WriteOk`)
//! strictly before another accepted write Y with token `t < t'` was invoked,
//! the store held `t'` when Y arrived and accepting Y was a violation. Writes
//! that were in flight at the same time may be applied in either order and
//! are never flagged (ordering by `WriteOk` alone would wrongly flag a write
//! applied before a pause whose `WriteOk` was only recorded after it). For
//! each accepted write Y at most one violation is reported, with the
//! largest-token witness X.
//!
//! # Malformed histories
//!
//! A history that no correct harness can produce is refused with a
//! [`CheckError`] rather than checked: a completion without an invocation, a
//! completion of the wrong type or from another process, two completions or
//! two invocations with one op id, or an `AcquireOk` while the process
//! already holds the lock. Invocations without completions are normal (the
//! worker died) and count as unknown outcomes.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::history::{Event, EventKind, OpType};

/// Which part of each hold is compared; see the module documentation.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Mode {
    /// A hold lasts from `AcquireOk` to `ReleaseInvoke`/`LostSignal`, or to
    /// the end of the history.
    #[default]
    Strict,
    /// A hold counts only from `AcquireOk` to its last proof of life.
    Conservative,
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Mode::Strict => "strict",
            Mode::Conservative => "conservative",
        })
    }
}

/// Options of [`check`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckOptions {
    /// How holds are compared.
    pub mode: Mode,
    /// At most this many violations *of each kind* are listed in
    /// [`Report::violations`]; the rest are only counted (see
    /// [`Report::violations_omitted`]).
    pub max_violations_listed: usize,
}

impl Default for CheckOptions {
    /// Strict mode, listing at most 1000 violations of each kind.
    fn default() -> Self {
        CheckOptions {
            mode: Mode::Strict,
            max_violations_listed: 1000,
        }
    }
}

/// How a hold ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum HoldEnd {
    /// The holder invoked release.
    Release,
    /// The holder was told it lost the lock.
    Lost,
    /// The history ended with the hold still open (the holder died or the
    /// run stopped).
    EndOfHistory,
}

/// One hold of the lock by one process; see the module documentation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hold {
    /// The `AcquireInvoke` of the acquisition.
    pub acquire_invoke: Event,
    /// The `AcquireOk` starting the hold.
    pub acquire_ok: Event,
    /// Fencing token of the `AcquireOk`.
    pub fencing_token: u64,
    /// How the hold ended.
    pub end: HoldEnd,
    /// The `ReleaseInvoke` or `LostSignal` ending the hold, if any.
    pub end_event: Option<Event>,
    /// The last proof of life inside the hold (see [`Mode::Conservative`]),
    /// if any besides the `AcquireOk`.
    pub last_proof: Option<Event>,
}

impl Hold {
    /// Worker id of the holder.
    pub fn worker(&self) -> u32 {
        self.acquire_ok.worker
    }

    /// Process (owner) id of the holder.
    pub fn process(&self) -> &str {
        &self.acquire_ok.process
    }

    /// The interval compared in `mode`: start time and end time, `None` for
    /// an open end (+infinity).
    pub fn interval(&self, mode: Mode) -> (u64, Option<u64>) {
        let start = self.acquire_ok.time_ns;
        match mode {
            Mode::Strict => (start, self.end_event.as_ref().map(|e| e.time_ns)),
            Mode::Conservative => (
                start,
                Some(self.last_proof.as_ref().map_or(start, |e| e.time_ns)),
            ),
        }
    }
}

/// What is wrong with a malformed history.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Malformation {
    /// A completion event has no invocation with its worker and op id.
    OrphanCompletion,
    /// A completion's type or process differs from its invocation's.
    MismatchedCompletion,
    /// An operation has two completions.
    DuplicateCompletion,
    /// Two invocations share a worker and op id.
    DuplicateOpId,
    /// A process got `AcquireOk` while it already held the lock.
    NestedAcquire,
}

/// A history that cannot be checked because no correct harness produces it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckError {
    /// What is wrong.
    pub problem: Malformation,
    /// The events showing it (earlier event first).
    pub events: Vec<Event>,
}

impl fmt::Display for CheckError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = match self.problem {
            Malformation::OrphanCompletion => "completion without invocation",
            Malformation::MismatchedCompletion => "completion does not match its invocation",
            Malformation::DuplicateCompletion => "operation completed twice",
            Malformation::DuplicateOpId => "op id invoked twice by one worker",
            Malformation::NestedAcquire => "acquire succeeded while the process held the lock",
        };
        write!(f, "malformed history: {what}")?;
        for event in &self.events {
            write!(
                f,
                "; worker {} process {} op {} at {} ns: {:?}",
                event.worker, event.process, event.op, event.time_ns, event.kind
            )?;
        }
        Ok(())
    }
}

impl std::error::Error for CheckError {}

/// Outcome counts of one type of operation.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OpCounts {
    /// Invocations.
    pub attempted: u64,
    /// Successful completions (for writes: accepted by the store).
    pub succeeded: u64,
    /// Failed completions (for writes: refused by the store).
    pub failed: u64,
    /// Outcome unknown: explicit `AcquireUnknown`, or no completion at all.
    pub unknown: u64,
}

impl OpCounts {
    fn add(self, other: OpCounts) -> OpCounts {
        OpCounts {
            attempted: self.attempted + other.attempted,
            succeeded: self.succeeded + other.succeeded,
            failed: self.failed + other.failed,
            unknown: self.unknown + other.unknown,
        }
    }
}

/// Statistics of a history.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counts {
    /// Events in the history.
    pub events: u64,
    /// Distinct worker ids.
    pub workers: u64,
    /// Distinct worker processes (worker id, process id).
    pub processes: u64,
    /// Acquire operations.
    pub acquires: OpCounts,
    /// Release operations.
    pub releases: OpCounts,
    /// Writes to the fencing store.
    pub writes: OpCounts,
    /// `LostSignal` events.
    pub lost_signals: u64,
    /// Holds (one per `AcquireOk`).
    pub holds: u64,
    /// Holds still open at the end of the history.
    pub holds_open_at_end: u64,
    /// Largest number of holds overlapping each other at one instant, with
    /// holds as compared in the report's mode.
    pub max_concurrent_holders: u64,
}

impl Counts {
    /// Acquires, releases and writes added together.
    pub fn operations(&self) -> OpCounts {
        self.acquires.add(self.releases).add(self.writes)
    }
}

/// The kind of a [`Violation`], with its key numbers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type")]
pub enum ViolationKind {
    /// Two processes held the lock at the same time.
    OverlappingHolds {
        /// Start of the common interval.
        overlap_start_ns: u64,
        /// End of the common interval, `None` if open.
        overlap_end_ns: Option<u64>,
    },
    /// Several acquisitions got the same fencing token.
    DuplicateToken {
        /// The token.
        token: u64,
        /// How many acquisitions got it.
        holds: u64,
    },
    /// An acquisition got a token not greater than an acquisition that
    /// completed before it was invoked.
    TokenInversion {
        /// Token of the earlier acquisition.
        earlier_token: u64,
        /// Token of the later acquisition.
        later_token: u64,
    },
    /// The store accepted a write whose token is older than the token of a
    /// write it had accepted before.
    StaleWriteAccepted {
        /// Token of the stale write.
        token: u64,
        /// Token of the earlier accepted write.
        newer_token: u64,
    },
}

/// One violation, with the events that show it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Violation {
    /// What was violated.
    pub kind: ViolationKind,
    /// Human-readable explanation.
    pub description: String,
    /// The events involved.
    pub events: Vec<Event>,
}

/// Numbers of violations of each kind (all of them, listed or not).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ViolationCounts {
    /// Pairs of overlapping holds.
    pub overlapping_holds: u64,
    /// Tokens handed out more than once.
    pub duplicate_tokens: u64,
    /// Acquisitions with an inverted token.
    pub token_inversions: u64,
    /// Stale writes accepted by the store.
    pub stale_writes_accepted: u64,
}

impl ViolationCounts {
    /// All violations.
    pub fn total(&self) -> u64 {
        self.overlapping_holds
            + self.duplicate_tokens
            + self.token_inversions
            + self.stale_writes_accepted
    }
}

/// What was left in Redis after a run, filled in by the caller.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Leftovers {
    /// Lock keys still present.
    pub lock_keys: Vec<String>,
    /// Remaining hold (reentrancy) counts by owner; zero counts are clean.
    pub hold_counts: BTreeMap<String, u64>,
    /// Entries still in wait queues.
    pub queue_entries: Vec<String>,
    /// Pub/sub channels still subscribed.
    pub subscriptions: Vec<String>,
}

impl Leftovers {
    /// Whether nothing was left behind.
    pub fn is_clean(&self) -> bool {
        self.lock_keys.is_empty()
            && self.hold_counts.values().all(|&count| count == 0)
            && self.queue_entries.is_empty()
            && self.subscriptions.is_empty()
    }

    /// Short description: `clean`, or what is left, such as
    /// `2 lock keys, 1 queue entry`.
    pub fn summary(&self) -> String {
        fn part(parts: &mut Vec<String>, n: usize, one: &str, many: &str) {
            if n > 0 {
                parts.push(format!("{n} {}", if n == 1 { one } else { many }));
            }
        }
        let mut parts = Vec::new();
        let holds = self.hold_counts.values().filter(|&&c| c > 0).count();
        part(&mut parts, self.lock_keys.len(), "lock key", "lock keys");
        part(&mut parts, holds, "hold count", "hold counts");
        part(
            &mut parts,
            self.queue_entries.len(),
            "queue entry",
            "queue entries",
        );
        part(
            &mut parts,
            self.subscriptions.len(),
            "subscription",
            "subscriptions",
        );
        if parts.is_empty() {
            "clean".to_owned()
        } else {
            parts.join(", ")
        }
    }
}

/// Result of checking a history.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Report {
    /// Mode the holds were compared in.
    pub mode: Mode,
    /// Statistics.
    pub counts: Counts,
    /// Number of violations of each kind.
    pub violation_counts: ViolationCounts,
    /// The violations found (at most [`CheckOptions::max_violations_listed`]
    /// of each kind).
    pub violations: Vec<Violation>,
    /// Violations counted but not listed.
    pub violations_omitted: u64,
    /// What was left in Redis, if the caller looked.
    pub leftovers: Option<Leftovers>,
}

impl Report {
    /// Whether no violation was found.
    pub fn is_safe(&self) -> bool {
        self.violation_counts.total() == 0
    }

    /// Whether no violation was found and nothing was left behind (absent
    /// leftovers count as clean).
    pub fn passed(&self) -> bool {
        self.is_safe() && self.leftovers.as_ref().is_none_or(Leftovers::is_clean)
    }

    /// Attaches the leftovers found after the run.
    pub fn with_leftovers(mut self, leftovers: Leftovers) -> Self {
        self.leftovers = Some(leftovers);
        self
    }
}

/// An operation seen in the history.
struct Op {
    op_type: OpType,
    invoke: usize,
    completed: bool,
}

/// An accepted write: indices of its invocation and its `WriteOk`, and its
/// token.
struct AcceptedWrite {
    invoke: usize,
    ok: usize,
    token: u64,
}

/// What one pass over the history yields.
struct Analysis {
    holds: Vec<Hold>,
    writes: Vec<AcceptedWrite>,
    counts: Counts,
}

fn malformed(problem: Malformation, events: &[&Event]) -> CheckError {
    CheckError {
        problem,
        events: events.iter().map(|&e| e.clone()).collect(),
    }
}

/// Per-hold bookkeeping during the pass: the hold and indices of its events.
struct OpenHold {
    invoke: usize,
    ok: usize,
    token: u64,
    end: Option<(HoldEnd, usize)>,
    last_proof: Option<usize>,
}

fn analyze(events: &[Event]) -> Result<Analysis, CheckError> {
    let mut order: Vec<usize> = (0..events.len()).collect();
    order.sort_by_key(|&i| events[i].time_ns);

    let mut ops: HashMap<(u32, u64), Op> = HashMap::new();
    let mut open: HashMap<(u32, &str), usize> = HashMap::new();
    let mut holds: Vec<OpenHold> = Vec::new();
    let mut writes = Vec::new();
    let mut counts = Counts::default();
    let mut workers = HashSet::new();
    let mut processes = HashSet::new();

    for &i in &order {
        let event = &events[i];
        workers.insert(event.worker);
        processes.insert((event.worker, event.process.as_str()));
        let holder = (event.worker, event.process.as_str());

        let Some((op_type, is_invoke)) = event.kind.op_role() else {
            // LostSignal.
            counts.lost_signals += 1;
            if let Some(h) = open.remove(&holder) {
                holds[h].end = Some((HoldEnd::Lost, i));
            }
            continue;
        };

        let key = (event.worker, event.op);
        let invoke_index = if is_invoke {
            if let Some(previous) = ops.get(&key) {
                return Err(malformed(
                    Malformation::DuplicateOpId,
                    &[&events[previous.invoke], event],
                ));
            }
            ops.insert(
                key,
                Op {
                    op_type,
                    invoke: i,
                    completed: false,
                },
            );
            match op_type {
                OpType::Acquire => counts.acquires.attempted += 1,
                OpType::Release => counts.releases.attempted += 1,
                OpType::Write => counts.writes.attempted += 1,
            }
            i
        } else {
            let Some(op) = ops.get_mut(&key) else {
                return Err(malformed(Malformation::OrphanCompletion, &[event]));
            };
            let invoke = &events[op.invoke];
            if op.op_type != op_type || invoke.process != event.process {
                return Err(malformed(
                    Malformation::MismatchedCompletion,
                    &[invoke, event],
                ));
            }
            if op.completed {
                return Err(malformed(
                    Malformation::DuplicateCompletion,
                    &[invoke, event],
                ));
            }
            op.completed = true;
            op.invoke
        };

        match &event.kind {
            EventKind::AcquireOk { fencing_token } => {
                counts.acquires.succeeded += 1;
                if let Some(&h) = open.get(&holder) {
                    return Err(malformed(
                        Malformation::NestedAcquire,
                        &[&events[holds[h].ok], event],
                    ));
                }
                open.insert(holder, holds.len());
                holds.push(OpenHold {
                    invoke: invoke_index,
                    ok: i,
                    token: *fencing_token,
                    end: None,
                    last_proof: None,
                });
            }
            EventKind::AcquireFail { .. } => counts.acquires.failed += 1,
            EventKind::AcquireUnknown => counts.acquires.unknown += 1,
            EventKind::ReleaseInvoke => {
                if let Some(h) = open.remove(&holder) {
                    holds[h].end = Some((HoldEnd::Release, i));
                    holds[h].last_proof = Some(i);
                }
            }
            EventKind::ReleaseOk => counts.releases.succeeded += 1,
            EventKind::ReleaseFail { .. } => counts.releases.failed += 1,
            EventKind::WriteInvoke { .. } | EventKind::WriteOk | EventKind::WriteRejected => {
                if let Some(&h) = open.get(&holder) {
                    holds[h].last_proof = Some(i);
                }
                match &event.kind {
                    EventKind::WriteOk => {
                        counts.writes.succeeded += 1;
                        if let EventKind::WriteInvoke { token, .. } = &events[invoke_index].kind {
                            writes.push(AcceptedWrite {
                                invoke: invoke_index,
                                ok: i,
                                token: *token,
                            });
                        }
                    }
                    EventKind::WriteRejected => counts.writes.failed += 1,
                    _ => {}
                }
            }
            EventKind::AcquireInvoke | EventKind::LostSignal => {}
        }
    }

    for op in ops.values().filter(|op| !op.completed) {
        match op.op_type {
            OpType::Acquire => counts.acquires.unknown += 1,
            OpType::Release => counts.releases.unknown += 1,
            OpType::Write => counts.writes.unknown += 1,
        }
    }
    counts.events = events.len() as u64;
    counts.workers = workers.len() as u64;
    counts.processes = processes.len() as u64;
    counts.holds = holds.len() as u64;
    counts.holds_open_at_end = holds.iter().filter(|h| h.end.is_none()).count() as u64;

    let holds = holds
        .into_iter()
        .map(|h| Hold {
            acquire_invoke: events[h.invoke].clone(),
            acquire_ok: events[h.ok].clone(),
            fencing_token: h.token,
            end: h.end.map_or(HoldEnd::EndOfHistory, |(end, _)| end),
            end_event: h.end.map(|(_, e)| events[e].clone()),
            last_proof: h.last_proof.map(|e| events[e].clone()),
        })
        .collect();
    Ok(Analysis {
        holds,
        writes,
        counts,
    })
}

/// Extracts the holds of a history, ordered by `AcquireOk` time.
///
/// The input need not be sorted. Errors on a malformed history (see the
/// module documentation).
pub fn holds(events: &[Event]) -> Result<Vec<Hold>, CheckError> {
    analyze(events).map(|a| a.holds)
}

/// Whether `[s1, e1]` and `[s2, e2]` overlap (`None` = open end).
fn overlaps(a: (u64, Option<u64>), b: (u64, Option<u64>)) -> bool {
    let before = |s: u64, e: Option<u64>| e.is_none_or(|e| s < e);
    before(a.0, b.1) && before(b.0, a.1)
}

/// Collects violations, counting all and listing a bounded number per kind.
struct Findings {
    max_listed: usize,
    counts: ViolationCounts,
    listed: [usize; 4],
    omitted: u64,
    violations: Vec<Violation>,
}

impl Findings {
    fn add(&mut self, violation: impl FnOnce() -> Violation, kind: usize) {
        let counter = match kind {
            0 => &mut self.counts.overlapping_holds,
            1 => &mut self.counts.duplicate_tokens,
            2 => &mut self.counts.token_inversions,
            _ => &mut self.counts.stale_writes_accepted,
        };
        *counter += 1;
        if self.listed[kind] < self.max_listed {
            self.listed[kind] += 1;
            self.violations.push(violation());
        } else {
            self.omitted += 1;
        }
    }
}

const OVERLAP: usize = 0;
const DUPLICATE: usize = 1;
const INVERSION: usize = 2;
const STALE: usize = 3;

fn describe_end(end: Option<u64>) -> String {
    end.map_or_else(|| "end of history".to_owned(), |e| e.to_string())
}

fn check_overlaps(holds: &[Hold], mode: Mode, findings: &mut Findings) -> u64 {
    let intervals: Vec<(u64, Option<u64>)> = holds.iter().map(|h| h.interval(mode)).collect();
    let mut by_start: Vec<usize> = (0..holds.len()).collect();
    by_start.sort_by_key(|&h| intervals[h].0);
    let mut active: Vec<usize> = Vec::new();
    let mut max_concurrent = 0u64;
    for &h in &by_start {
        let (start, _) = intervals[h];
        active.retain(|&a| intervals[a].1.is_none_or(|end| end > start));
        let mut concurrent = 1u64;
        for &a in &active {
            if !overlaps(intervals[a], intervals[h]) {
                continue;
            }
            concurrent += 1;
            let (first, second) = (&holds[a], &holds[h]);
            if first.worker() == second.worker() && first.process() == second.process() {
                continue;
            }
            findings.add(
                || {
                    let (s1, e1) = intervals[a];
                    let (s2, e2) = intervals[h];
                    let overlap_start_ns = s1.max(s2);
                    let overlap_end_ns = match (e1, e2) {
                        (Some(x), Some(y)) => Some(x.min(y)),
                        (x, None) => x,
                        (None, y) => y,
                    };
                    let mut events = Vec::new();
                    for hold in [first, second] {
                        events.push(hold.acquire_ok.clone());
                        let tail = match mode {
                            Mode::Strict => &hold.end_event,
                            Mode::Conservative => &hold.last_proof,
                        };
                        events.extend(tail.iter().cloned());
                    }
                    Violation {
                        kind: ViolationKind::OverlappingHolds {
                            overlap_start_ns,
                            overlap_end_ns,
                        },
                        description: format!(
                            "worker {} ({}) held the lock over [{s1}, {}] and worker {} ({}) \
                             over [{s2}, {}] ({mode} mode)",
                            first.worker(),
                            first.process(),
                            describe_end(e1),
                            second.worker(),
                            second.process(),
                            describe_end(e2),
                        ),
                        events,
                    }
                },
                OVERLAP,
            );
        }
        max_concurrent = max_concurrent.max(concurrent);
        active.push(h);
    }
    max_concurrent
}

fn check_tokens(holds: &[Hold], findings: &mut Findings) {
    let mut by_token: BTreeMap<u64, Vec<usize>> = BTreeMap::new();
    for (i, hold) in holds.iter().enumerate() {
        by_token.entry(hold.fencing_token).or_default().push(i);
    }
    for (&token, group) in by_token.iter().filter(|(_, g)| g.len() > 1) {
        findings.add(
            || Violation {
                kind: ViolationKind::DuplicateToken {
                    token,
                    holds: group.len() as u64,
                },
                description: format!("fencing token {token} was handed out {} times", group.len()),
                events: group.iter().map(|&i| holds[i].acquire_ok.clone()).collect(),
            },
            DUPLICATE,
        );
    }

    let mut by_ok: Vec<usize> = (0..holds.len()).collect();
    by_ok.sort_by_key(|&i| holds[i].acquire_ok.time_ns);
    let mut by_invoke: Vec<usize> = (0..holds.len()).collect();
    by_invoke.sort_by_key(|&i| holds[i].acquire_invoke.time_ns);
    let mut next = 0usize;
    let mut best: Option<usize> = None;
    for &b in &by_invoke {
        let invoked = holds[b].acquire_invoke.time_ns;
        while let Some(&a) = by_ok.get(next) {
            if holds[a].acquire_ok.time_ns >= invoked {
                break;
            }
            if best.is_none_or(|w| holds[a].fencing_token > holds[w].fencing_token) {
                best = Some(a);
            }
            next += 1;
        }
        let Some(a) = best else { continue };
        let (earlier, later) = (&holds[a], &holds[b]);
        if earlier.fencing_token > later.fencing_token {
            findings.add(
                || Violation {
                    kind: ViolationKind::TokenInversion {
                        earlier_token: earlier.fencing_token,
                        later_token: later.fencing_token,
                    },
                    description: format!(
                        "worker {} ({}) got token {} at {} ns, before worker {} ({}) invoked \
                         acquire at {} ns and got the smaller token {}",
                        earlier.worker(),
                        earlier.process(),
                        earlier.fencing_token,
                        earlier.acquire_ok.time_ns,
                        later.worker(),
                        later.process(),
                        later.acquire_invoke.time_ns,
                        later.fencing_token,
                    ),
                    events: vec![
                        earlier.acquire_ok.clone(),
                        later.acquire_invoke.clone(),
                        later.acquire_ok.clone(),
                    ],
                },
                INVERSION,
            );
        }
    }
}

fn check_writes(events: &[Event], writes: &[AcceptedWrite], findings: &mut Findings) {
    let mut by_ok: Vec<&AcceptedWrite> = writes.iter().collect();
    by_ok.sort_by_key(|w| events[w.ok].time_ns);
    let mut by_invoke: Vec<&AcceptedWrite> = writes.iter().collect();
    by_invoke.sort_by_key(|w| events[w.invoke].time_ns);
    let mut next = 0usize;
    let mut best: Option<&AcceptedWrite> = None;
    for &y in &by_invoke {
        let invoked = events[y.invoke].time_ns;
        while let Some(&x) = by_ok.get(next) {
            if events[x.ok].time_ns >= invoked {
                break;
            }
            if best.is_none_or(|w| x.token > w.token) {
                best = Some(x);
            }
            next += 1;
        }
        let Some(x) = best else { continue };
        if x.token > y.token {
            findings.add(
                || {
                    let (xi, xo, yi, yo) = (
                        &events[x.invoke],
                        &events[x.ok],
                        &events[y.invoke],
                        &events[y.ok],
                    );
                    Violation {
                        kind: ViolationKind::StaleWriteAccepted {
                            token: y.token,
                            newer_token: x.token,
                        },
                        description: format!(
                            "the store accepted a write with token {} from worker {} ({}) \
                             invoked at {} ns, after accepting token {} from worker {} ({}) \
                             at {} ns",
                            y.token,
                            yi.worker,
                            yi.process,
                            yi.time_ns,
                            x.token,
                            xo.worker,
                            xo.process,
                            xo.time_ns,
                        ),
                        events: vec![xi.clone(), xo.clone(), yi.clone(), yo.clone()],
                    }
                },
                STALE,
            );
        }
    }
}

/// Checks a history (in any order; normally from
/// [`crate::history::read_histories`]) and reports violations and counts.
///
/// The report's `leftovers` is `None`; attach them with
/// [`Report::with_leftovers`]. Errors on a malformed history (see the module
/// documentation); never panics.
pub fn check(events: &[Event], options: &CheckOptions) -> Result<Report, CheckError> {
    let Analysis {
        holds,
        writes,
        mut counts,
    } = analyze(events)?;
    let mut findings = Findings {
        max_listed: options.max_violations_listed,
        counts: ViolationCounts::default(),
        listed: [0; 4],
        omitted: 0,
        violations: Vec::new(),
    };
    counts.max_concurrent_holders = check_overlaps(&holds, options.mode, &mut findings);
    check_tokens(&holds, &mut findings);
    check_writes(events, &writes, &mut findings);
    Ok(Report {
        mode: options.mode,
        counts,
        violation_counts: findings.counts,
        violations: findings.violations,
        violations_omitted: findings.omitted,
        leftovers: None,
    })
}

#[cfg(test)]
mod tests;
