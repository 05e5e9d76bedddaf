//! Fault-injection harness and mutual-exclusion checker for latchkey.
//!
//! Worker processes loop acquire → critical section → release on one
//! distributed lock and record every step as [`Event`]s in a history file of
//! their own ([`HistoryWriter`]). After the run the histories are merged
//! ([`read_histories`]) and checked ([`check`]) for overlapping holders,
//! fencing-token duplicates and inversions, and stale writes accepted by the
//! fencing store; the [`Report`] can be rendered as a Markdown table row
//! ([`report::markdown_row`]).
//!
//! The worker processes are the `chaos-worker` binary ([`worker`]); the
//! scenario tests drive them, the servers and the faults with [`harness`].

#![warn(missing_docs)]

pub mod checker;
pub mod harness;
pub mod history;
pub mod report;
pub mod store;
pub mod worker;

pub use checker::{check, CheckError, CheckOptions, Leftovers, Mode, Report};
pub use history::{now_ns, read_histories, Event, EventKind, HistoryError, HistoryWriter};
pub use store::{FencedStore, FENCED_WRITE_LUA};
