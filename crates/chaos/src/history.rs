//! The event model of a chaos run and its JSON-lines storage.
//!
//! Every worker process records what it does to the lock as a sequence of
//! [`Event`]s, one JSON object per line, in a file of its own (see
//! [`HistoryWriter`]). After the run, [`read_histories`] merges the files of
//! all workers into one history ordered by time, ready for
//! [`crate::checker::check`].
//!
//! # Time
//!
//! All events carry a timestamp in nanoseconds of `CLOCK_MONOTONIC` (see
//! [`now_ns`]). That clock is shared by every process on one machine, so the
//! timestamps of different workers can be compared with each other, which
//! `std::time::Instant` does not allow across processes.
//!
//! # Operations
//!
//! An operation is an invocation event followed by at most one completion
//! event with the same worker id and op id:
//!
//! | invocation | completions |
//! | --- | --- |
//! | [`EventKind::AcquireInvoke`] | [`EventKind::AcquireOk`], [`EventKind::AcquireFail`], [`EventKind::AcquireUnknown`] |
//! | [`EventKind::ReleaseInvoke`] | [`EventKind::ReleaseOk`], [`EventKind::ReleaseFail`] |
//! | [`EventKind::WriteInvoke`] | [`EventKind::WriteOk`], [`EventKind::WriteRejected`] |
//!
//! An invocation without a completion means the worker died (or the run
//! ended) while the operation was in flight. [`EventKind::LostSignal`] is a
//! single event that is not part of an operation; its op id is informational
//! (by convention the op id of the acquisition whose hold was lost).
//!
//! # File format
//!
//! One event per line, for example:
//!
//! ```text
//! {"worker":3,"process":"w3-4711","op":8,"time_ns":5123,"kind":{"type":"AcquireOk","fencing_token":42}}
//! ```

use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// Reads `CLOCK_MONOTONIC` and returns it in nanoseconds.
///
/// Returns an error if the kernel refuses the clock or reports a value that
/// does not fit in a `u64` nanosecond count; neither happens on Linux.
pub fn try_now_ns() -> io::Result<u64> {
    // SAFETY: an all-zero `timespec` is a valid value of that plain C struct.
    let mut ts: libc::timespec = unsafe { std::mem::zeroed() };
    // SAFETY: `ts` is a valid, exclusively borrowed `timespec` that outlives
    // the call; `clock_gettime` writes only into it.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    let secs = u64::try_from(ts.tv_sec)
        .map_err(|_| io::Error::other("CLOCK_MONOTONIC returned negative seconds"))?;
    let nanos = u64::try_from(ts.tv_nsec)
        .map_err(|_| io::Error::other("CLOCK_MONOTONIC returned negative nanoseconds"))?;
    secs.checked_mul(1_000_000_000)
        .and_then(|ns| ns.checked_add(nanos))
        .ok_or_else(|| io::Error::other("CLOCK_MONOTONIC overflows u64 nanoseconds"))
}

/// Current time of `CLOCK_MONOTONIC` in nanoseconds, the one clock shared
/// by all processes of a run.
///
/// # Panics
///
/// Panics only if the kernel refuses `CLOCK_MONOTONIC`, which POSIX requires
/// to exist and Linux always provides. Use [`try_now_ns`] to get an error
/// instead.
pub fn now_ns() -> u64 {
    match try_now_ns() {
        Ok(ns) => ns,
        Err(err) => panic!("CLOCK_MONOTONIC is unavailable: {err}"),
    }
}

/// One recorded event of a worker.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Event {
    /// Id of the worker slot (stable across restarts of the worker process).
    pub worker: u32,
    /// Id of the worker process: its client id, which every owner id of its
    /// acquires starts with (changes when the
    /// worker process is restarted).
    pub process: String,
    /// Operation id, unique per worker; an invocation and its completion
    /// share it.
    pub op: u64,
    /// `CLOCK_MONOTONIC` time of the event in nanoseconds (see [`now_ns`]).
    pub time_ns: u64,
    /// What happened.
    pub kind: EventKind,
}

impl Event {
    /// Builds an event from its parts.
    pub fn new(
        worker: u32,
        process: impl Into<String>,
        op: u64,
        time_ns: u64,
        kind: EventKind,
    ) -> Self {
        Event {
            worker,
            process: process.into(),
            op,
            time_ns,
            kind,
        }
    }
}

/// What an [`Event`] records.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "type")]
pub enum EventKind {
    /// The worker calls acquire.
    AcquireInvoke,
    /// Acquire returned: the worker holds the lock and enters the critical
    /// section.
    AcquireOk {
        /// Fencing token handed out with the lock.
        fencing_token: u64,
    },
    /// Acquire returned an error: the worker does not hold the lock.
    AcquireFail {
        /// Why it failed, for humans.
        reason: String,
    },
    /// Acquire timed out: the lock may or may not have been taken; the
    /// worker does not enter the critical section.
    AcquireUnknown,
    /// The worker leaves the critical section and calls release.
    ReleaseInvoke,
    /// Release returned successfully.
    ReleaseOk,
    /// Release returned an error.
    ReleaseFail {
        /// Why it failed, for humans.
        reason: String,
    },
    /// The library told the worker that it lost the lock; the worker leaves
    /// the critical section.
    LostSignal,
    /// The worker sends a write to the fencing store.
    WriteInvoke {
        /// Fencing token the write is sent with.
        token: u64,
        /// Value written.
        value: String,
    },
    /// The fencing store accepted the write.
    WriteOk,
    /// The fencing store refused the write as stale.
    WriteRejected,
}

/// The kind of operation an event belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OpType {
    Acquire,
    Release,
    Write,
}

impl EventKind {
    /// The operation type and whether this event invokes it; `None` for
    /// [`EventKind::LostSignal`].
    pub(crate) fn op_role(&self) -> Option<(OpType, bool)> {
        match self {
            EventKind::AcquireInvoke => Some((OpType::Acquire, true)),
            EventKind::AcquireOk { .. }
            | EventKind::AcquireFail { .. }
            | EventKind::AcquireUnknown => Some((OpType::Acquire, false)),
            EventKind::ReleaseInvoke => Some((OpType::Release, true)),
            EventKind::ReleaseOk | EventKind::ReleaseFail { .. } => Some((OpType::Release, false)),
            EventKind::WriteInvoke { .. } => Some((OpType::Write, true)),
            EventKind::WriteOk | EventKind::WriteRejected => Some((OpType::Write, false)),
            EventKind::LostSignal => None,
        }
    }
}

/// Errors of writing or reading history files.
#[derive(Debug)]
pub enum HistoryError {
    /// A file system operation failed.
    Io {
        /// File or directory concerned.
        path: PathBuf,
        /// Underlying error.
        source: io::Error,
    },
    /// A complete (newline-terminated) line is not a valid event.
    Parse {
        /// File concerned.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// Underlying error.
        source: serde_json::Error,
    },
    /// An event is older than the event before it in the same file.
    NonMonotonic {
        /// File concerned.
        path: PathBuf,
        /// 1-based line number of the offending event (for a write refused
        /// by [`HistoryWriter`], the line it would have been written to).
        line: usize,
        /// Time of the previous event.
        previous_ns: u64,
        /// Time of the offending event.
        time_ns: u64,
    },
    /// An event could not be serialized.
    Serialize(serde_json::Error),
    /// The clock could not be read.
    Clock(io::Error),
}

impl fmt::Display for HistoryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HistoryError::Io { path, source } => write!(f, "{}: {source}", path.display()),
            HistoryError::Parse { path, line, source } => {
                write!(f, "{}:{line}: invalid event: {source}", path.display())
            }
            HistoryError::NonMonotonic {
                path,
                line,
                previous_ns,
                time_ns,
            } => write!(
                f,
                "{}:{line}: time goes backwards ({time_ns} ns after {previous_ns} ns)",
                path.display()
            ),
            HistoryError::Serialize(source) => write!(f, "cannot serialize event: {source}"),
            HistoryError::Clock(source) => write!(f, "cannot read CLOCK_MONOTONIC: {source}"),
        }
    }
}

impl std::error::Error for HistoryError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            HistoryError::Io { source, .. } | HistoryError::Clock(source) => Some(source),
            HistoryError::Parse { source, .. } | HistoryError::Serialize(source) => Some(source),
            HistoryError::NonMonotonic { .. } => None,
        }
    }
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> HistoryError + '_ {
    move |source| HistoryError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// The events of one history file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileHistory {
    /// The file read.
    pub path: PathBuf,
    /// Its events, in file order (which is time order).
    pub events: Vec<Event>,
    /// Whether an unparseable, unterminated last line (an event cut short
    /// by the death of its writer) was skipped.
    pub truncated_tail: bool,
}

/// Parses the bytes of a history file.
///
/// Blank lines are skipped. A last line without a terminating newline that
/// does not parse is skipped and reported through `truncated_tail`; any
/// other unparseable line is an error.
fn parse_history(path: &Path, bytes: &[u8]) -> Result<FileHistory, HistoryError> {
    let mut events: Vec<Event> = Vec::new();
    let mut truncated_tail = false;
    let mut previous_ns: Option<u64> = None;
    let mut rest = bytes;
    let mut line_no = 0usize;
    while !rest.is_empty() {
        line_no += 1;
        let (line, terminated, next) = match rest.iter().position(|&b| b == b'\n') {
            Some(pos) => (&rest[..pos], true, &rest[pos + 1..]),
            None => (rest, false, &rest[rest.len()..]),
        };
        rest = next;
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let event: Event = match serde_json::from_slice(line) {
            Ok(event) => event,
            Err(_) if !terminated => {
                truncated_tail = true;
                break;
            }
            Err(source) => {
                return Err(HistoryError::Parse {
                    path: path.to_path_buf(),
                    line: line_no,
                    source,
                })
            }
        };
        if let Some(prev) = previous_ns {
            if event.time_ns < prev {
                return Err(HistoryError::NonMonotonic {
                    path: path.to_path_buf(),
                    line: line_no,
                    previous_ns: prev,
                    time_ns: event.time_ns,
                });
            }
        }
        previous_ns = Some(event.time_ns);
        events.push(event);
    }
    Ok(FileHistory {
        path: path.to_path_buf(),
        events,
        truncated_tail,
    })
}

/// Reads one history file, tolerating a truncated last line.
///
/// Errors: the file cannot be read, a complete line is not a valid event,
/// or time goes backwards within the file.
pub fn read_history_file(path: &Path) -> Result<FileHistory, HistoryError> {
    let bytes = fs::read(path).map_err(io_err(path))?;
    parse_history(path, &bytes)
}

/// Reads every `*.jsonl` file of `dir` (not recursing), in file-name order.
///
/// Other files are ignored. Errors as for [`read_history_file`], or if the
/// directory cannot be listed.
pub fn read_history_files(dir: &Path) -> Result<Vec<FileHistory>, HistoryError> {
    let mut paths = Vec::new();
    for entry in fs::read_dir(dir).map_err(io_err(dir))? {
        let entry = entry.map_err(io_err(dir))?;
        let path = entry.path();
        let is_jsonl = path.extension().is_some_and(|ext| ext == "jsonl");
        if is_jsonl && path.is_file() {
            paths.push(path);
        }
    }
    paths.sort();
    paths.iter().map(|p| read_history_file(p)).collect()
}

/// Reads and merges the histories of all workers found in `dir` (every
/// `*.jsonl` file) into one list ordered by time.
///
/// Events with equal times keep file-name order, then file order. A
/// truncated last line of a file is skipped. Errors as for
/// [`read_history_files`].
pub fn read_histories(dir: &Path) -> Result<Vec<Event>, HistoryError> {
    let files = read_history_files(dir)?;
    let mut events: Vec<Event> = files.into_iter().flat_map(|f| f.events).collect();
    events.sort_by_key(|e| e.time_ns);
    Ok(events)
}

/// Appends the events of one worker process to its history file.
///
/// Each event is written as one line with a single `write` call on a file
/// opened in append mode, without user-space buffering, so a `kill -9` of
/// the worker loses at most the line being written (a truncated line that
/// the readers skip). With [`HistoryWriter::set_sync_data`] every line is
/// also `fdatasync`ed, which protects against a machine crash too.
#[derive(Debug)]
pub struct HistoryWriter {
    file: File,
    path: PathBuf,
    worker: u32,
    process: String,
    next_op: u64,
    last_time_ns: Option<u64>,
    lines: usize,
    sync_data: bool,
}

impl HistoryWriter {
    /// Name of the history file of `worker` inside a run directory,
    /// `worker-NNNNN.jsonl`.
    pub fn file_name(worker: u32) -> String {
        format!("worker-{worker:05}.jsonl")
    }

    /// Opens the history file of `worker` inside `dir` (creating the
    /// directory and the file if needed) for the process `process`.
    ///
    /// See [`HistoryWriter::open`] for what happens to an existing file.
    pub fn create(
        dir: &Path,
        worker: u32,
        process: impl Into<String>,
    ) -> Result<Self, HistoryError> {
        fs::create_dir_all(dir).map_err(io_err(dir))?;
        Self::open(dir.join(Self::file_name(worker)), worker, process)
    }

    /// Opens `path` for appending the events of `worker`/`process`.
    ///
    /// If the file already exists (a restarted worker), its complete lines
    /// are validated, a truncated last line left by a killed writer is cut
    /// off, and op ids continue after the largest op id of `worker` found
    /// in it, so op ids stay unique per worker across restarts.
    pub fn open(
        path: impl Into<PathBuf>,
        worker: u32,
        process: impl Into<String>,
    ) -> Result<Self, HistoryError> {
        let path = path.into();
        let mut next_op = 0u64;
        let mut last_time_ns = None;
        let mut lines = 0usize;
        match fs::read(&path) {
            Ok(bytes) => {
                let existing = parse_history(&path, &bytes)?;
                let keep = bytes
                    .iter()
                    .rposition(|&b| b == b'\n')
                    .map_or(0, |pos| pos + 1);
                lines = bytes[..keep].iter().filter(|&&b| b == b'\n').count();
                if keep < bytes.len() {
                    // The last line has no newline: the writer was killed in
                    // the middle of it. Cut it off; if it nevertheless parsed
                    // (only its newline was lost), write it back terminated.
                    let file = OpenOptions::new()
                        .write(true)
                        .open(&path)
                        .map_err(io_err(&path))?;
                    file.set_len(keep as u64).map_err(io_err(&path))?;
                    drop(file);
                    if !existing.truncated_tail {
                        let mut line = bytes[keep..].to_vec();
                        line.push(b'\n');
                        let mut file = OpenOptions::new()
                            .append(true)
                            .open(&path)
                            .map_err(io_err(&path))?;
                        file.write_all(&line).map_err(io_err(&path))?;
                        lines += 1;
                    }
                }
                for event in &existing.events {
                    if event.worker == worker {
                        next_op = next_op.max(event.op.saturating_add(1));
                    }
                }
                last_time_ns = existing.events.last().map(|e| e.time_ns);
            }
            Err(err) if err.kind() == io::ErrorKind::NotFound => {}
            Err(err) => return Err(io_err(&path)(err)),
        }
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(io_err(&path))?;
        Ok(HistoryWriter {
            file,
            path,
            worker,
            process: process.into(),
            next_op,
            last_time_ns,
            lines,
            sync_data: false,
        })
    }

    /// Path of the history file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Worker id stamped on recorded events.
    pub fn worker(&self) -> u32 {
        self.worker
    }

    /// Process id stamped on recorded events.
    pub fn process(&self) -> &str {
        &self.process
    }

    /// Whether every line is `fdatasync`ed after being written (off by
    /// default: a killed process loses nothing the kernel already has).
    pub fn set_sync_data(&mut self, sync_data: bool) {
        self.sync_data = sync_data;
    }

    /// Allocates a fresh op id for this worker.
    pub fn next_op(&mut self) -> u64 {
        let op = self.next_op;
        self.next_op = self.next_op.saturating_add(1);
        op
    }

    /// Allocates a fresh op id and records `kind` (normally an invocation)
    /// with it at the current time; returns the recorded event.
    pub fn invoke(&mut self, kind: EventKind) -> Result<Event, HistoryError> {
        let op = self.next_op();
        self.record(op, kind)
    }

    /// Records `kind` for operation `op` at the current time and returns
    /// the event written.
    pub fn record(&mut self, op: u64, kind: EventKind) -> Result<Event, HistoryError> {
        let time_ns = try_now_ns().map_err(HistoryError::Clock)?;
        let event = Event::new(self.worker, self.process.clone(), op, time_ns, kind);
        self.append(&event)?;
        Ok(event)
    }

    /// Appends an arbitrary event as one line and flushes it to the kernel.
    ///
    /// Refuses (with [`HistoryError::NonMonotonic`]) an event older than the
    /// previous event of the file, since readers reject such files.
    pub fn append(&mut self, event: &Event) -> Result<(), HistoryError> {
        if let Some(prev) = self.last_time_ns {
            if event.time_ns < prev {
                return Err(HistoryError::NonMonotonic {
                    path: self.path.clone(),
                    line: self.lines + 1,
                    previous_ns: prev,
                    time_ns: event.time_ns,
                });
            }
        }
        let mut line = serde_json::to_vec(event).map_err(HistoryError::Serialize)?;
        line.push(b'\n');
        self.file.write_all(&line).map_err(io_err(&self.path))?;
        if self.sync_data {
            self.file.sync_data().map_err(io_err(&self.path))?;
        }
        self.last_time_ns = Some(event.time_ns);
        self.lines += 1;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all_kinds() -> Vec<EventKind> {
        vec![
            EventKind::AcquireInvoke,
            EventKind::AcquireOk {
                fencing_token: u64::MAX,
            },
            EventKind::AcquireFail {
                reason: "busy \"quoted\"\nnewline".into(),
            },
            EventKind::AcquireUnknown,
            EventKind::ReleaseInvoke,
            EventKind::ReleaseOk,
            EventKind::ReleaseFail {
                reason: "not owner".into(),
            },
            EventKind::LostSignal,
            EventKind::WriteInvoke {
                token: 7,
                value: "v|ü".into(),
            },
            EventKind::WriteOk,
            EventKind::WriteRejected,
        ]
    }

    fn event(worker: u32, op: u64, time_ns: u64, kind: EventKind) -> Event {
        Event::new(worker, format!("p{worker}"), op, time_ns, kind)
    }

    #[test]
    fn every_kind_round_trips_through_json() {
        for (i, kind) in all_kinds().into_iter().enumerate() {
            let e = event(3, i as u64, 1_000 + i as u64, kind);
            let line = serde_json::to_string(&e).unwrap();
            assert!(!line.contains('\n'), "one event is one line: {line}");
            let back: Event = serde_json::from_str(&line).unwrap();
            assert_eq!(back, e);
        }
    }

    #[test]
    fn json_line_format_is_stable() {
        let e = event(3, 8, 5123, EventKind::AcquireOk { fencing_token: 42 });
        assert_eq!(
            serde_json::to_string(&e).unwrap(),
            r#"{"worker":3,"process":"p3","op":8,"time_ns":5123,"kind":{"type":"AcquireOk","fencing_token":42}}"#
        );
        let unit: Event = serde_json::from_str(
            r#"{"worker":1,"process":"x","op":0,"time_ns":1,"kind":{"type":"LostSignal"}}"#,
        )
        .unwrap();
        assert_eq!(unit.kind, EventKind::LostSignal);
    }

    #[test]
    fn now_ns_is_monotonic_and_plausible() {
        let a = now_ns();
        let b = now_ns();
        assert!(a > 0);
        assert!(b >= a);
        std::thread::sleep(std::time::Duration::from_millis(2));
        assert!(try_now_ns().unwrap() >= a + 2_000_000);
    }

    #[test]
    fn writers_then_reader_merge_workers_in_time_order() {
        let dir = tempfile::tempdir().unwrap();
        let mut w1 = HistoryWriter::create(dir.path(), 1, "p1").unwrap();
        let mut w2 = HistoryWriter::create(dir.path(), 2, "p2").unwrap();
        w1.append(&event(1, 0, 10, EventKind::AcquireInvoke))
            .unwrap();
        w2.append(&event(2, 0, 5, EventKind::AcquireInvoke))
            .unwrap();
        w2.append(&event(
            2,
            0,
            20,
            EventKind::AcquireFail { reason: "x".into() },
        ))
        .unwrap();
        w1.append(&event(1, 0, 15, EventKind::AcquireOk { fencing_token: 1 }))
            .unwrap();
        let recorded = w1.invoke(EventKind::ReleaseInvoke).unwrap();
        assert_eq!(recorded.op, 0, "op ids start at 0");
        assert_eq!(recorded.worker, 1);
        assert_eq!(recorded.process, "p1");
        assert!(recorded.time_ns >= 15);
        assert_eq!(w1.path(), dir.path().join("worker-00001.jsonl"));
        assert_eq!((w1.worker(), w1.process()), (1, "p1"));
        fs::write(dir.path().join("notes.txt"), "not a history\n").unwrap();

        let events = read_histories(dir.path()).unwrap();
        let times: Vec<u64> = events.iter().map(|e| e.time_ns).collect();
        assert_eq!(&times[..4], &[5, 10, 15, 20]);
        assert_eq!(events.len(), 5);
        assert_eq!(events[4], recorded);
        let files = read_history_files(dir.path()).unwrap();
        assert_eq!(files.len(), 2);
        assert!(files.iter().all(|f| !f.truncated_tail));
    }

    #[test]
    fn truncated_last_line_is_tolerated() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("worker-00001.jsonl");
        let mut w = HistoryWriter::open(&path, 1, "p1").unwrap();
        w.append(&event(1, 0, 10, EventKind::AcquireInvoke))
            .unwrap();
        w.append(&event(1, 0, 11, EventKind::AcquireOk { fencing_token: 3 }))
            .unwrap();
        drop(w);
        let mut file = OpenOptions::new().append(true).open(&path).unwrap();
        file.write_all(br#"{"worker":1,"process":"p1","op":1,"time_ns":12,"kind":{"ty"#)
            .unwrap();
        drop(file);

        let history = read_history_file(&path).unwrap();
        assert!(history.truncated_tail);
        assert_eq!(history.events.len(), 2);
        assert_eq!(read_histories(dir.path()).unwrap().len(), 2);
    }

    #[test]
    fn truncated_tail_with_invalid_utf8_is_tolerated() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("w.jsonl");
        let good = serde_json::to_string(&event(1, 0, 1, EventKind::AcquireInvoke)).unwrap();
        let mut bytes = format!("{good}\n").into_bytes();
        bytes.extend_from_slice(b"{\"worker\":1,\"process\":\"\xc3");
        fs::write(&path, bytes).unwrap();
        let history = read_history_file(&path).unwrap();
        assert!(history.truncated_tail);
        assert_eq!(history.events.len(), 1);
    }

    #[test]
    fn complete_but_unterminated_last_line_is_kept() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("w.jsonl");
        let line = serde_json::to_string(&event(1, 4, 1, EventKind::AcquireInvoke)).unwrap();
        fs::write(&path, &line).unwrap();
        let history = read_history_file(&path).unwrap();
        assert!(!history.truncated_tail);
        assert_eq!(history.events.len(), 1);

        // Reopening terminates it, so the next event gets a line of its own.
        let mut w = HistoryWriter::open(&path, 1, "p1").unwrap();
        assert_eq!(w.next_op(), 5);
        w.append(&event(1, 5, 2, EventKind::AcquireInvoke)).unwrap();
        assert_eq!(read_history_file(&path).unwrap().events.len(), 2);
    }

    #[test]
    fn corrupt_middle_line_is_an_error_with_its_line_number() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("w.jsonl");
        let good = serde_json::to_string(&event(1, 0, 1, EventKind::AcquireInvoke)).unwrap();
        fs::write(&path, format!("{good}\n\n{{broken\n{good}\n")).unwrap();
        let err = read_history_file(&path).unwrap_err();
        match &err {
            HistoryError::Parse { line, .. } => assert_eq!(*line, 3),
            other => panic!("unexpected error {other:?}"),
        }
        assert!(err.to_string().contains(":3:"));
        assert!(read_histories(dir.path()).is_err());
        assert!(HistoryWriter::open(&path, 1, "p1").is_err());
    }

    #[test]
    fn time_going_backwards_in_a_file_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("w.jsonl");
        let a = serde_json::to_string(&event(1, 0, 10, EventKind::AcquireInvoke)).unwrap();
        let b = serde_json::to_string(&event(1, 1, 9, EventKind::AcquireInvoke)).unwrap();
        fs::write(&path, format!("{a}\n{b}\n")).unwrap();
        assert!(matches!(
            read_history_file(&path),
            Err(HistoryError::NonMonotonic {
                line: 2,
                previous_ns: 10,
                time_ns: 9,
                ..
            })
        ));
    }

    #[test]
    fn writer_refuses_an_event_older_than_the_previous_one() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = HistoryWriter::create(dir.path(), 1, "p1").unwrap();
        w.append(&event(1, 0, 10, EventKind::AcquireInvoke))
            .unwrap();
        let err = w
            .append(&event(1, 1, 9, EventKind::AcquireInvoke))
            .unwrap_err();
        assert!(matches!(err, HistoryError::NonMonotonic { line: 2, .. }));
        assert_eq!(read_histories(dir.path()).unwrap().len(), 1);
    }

    #[test]
    fn reopening_cuts_a_truncated_tail_and_continues_op_ids() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = HistoryWriter::create(dir.path(), 7, "first").unwrap();
        w.set_sync_data(true);
        let invoke = w.invoke(EventKind::AcquireInvoke).unwrap();
        w.record(invoke.op, EventKind::AcquireOk { fencing_token: 1 })
            .unwrap();
        w.invoke(EventKind::WriteInvoke {
            token: 1,
            value: "x".into(),
        })
        .unwrap();
        let path = w.path().to_path_buf();
        drop(w);
        // The first process is killed in the middle of a line.
        let mut file = OpenOptions::new().append(true).open(&path).unwrap();
        file.write_all(b"{\"worker\":7,\"proc").unwrap();
        drop(file);

        let mut w = HistoryWriter::create(dir.path(), 7, "second").unwrap();
        let e = w.invoke(EventKind::AcquireInvoke).unwrap();
        assert_eq!(e.op, 2, "op ids continue after the previous process");
        let history = read_history_file(&path).unwrap();
        assert!(!history.truncated_tail, "the partial line was cut off");
        assert_eq!(history.events.len(), 4);
        assert_eq!(history.events[3].process, "second");
    }

    #[test]
    fn empty_and_missing_inputs() {
        let dir = tempfile::tempdir().unwrap();
        assert!(read_histories(dir.path()).unwrap().is_empty());
        fs::write(dir.path().join("empty.jsonl"), "").unwrap();
        assert!(read_histories(dir.path()).unwrap().is_empty());
        let missing = dir.path().join("missing");
        let err = read_histories(&missing).unwrap_err();
        assert!(matches!(err, HistoryError::Io { .. }));
        assert!(err.to_string().contains("missing"));
        assert!(read_history_file(&missing.join("x.jsonl")).is_err());
    }
}
