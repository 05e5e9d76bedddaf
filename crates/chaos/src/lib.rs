//! Fault-injection harness and mutual-exclusion checker for latchkey.
//!
//! Worker processes loop acquire → critical section → release on one
//! distributed lock and record every step as [`Event`]s in a history file of
//! their own ([`HistoryWriter`]). After the run the histories are merged
//! ([`read_histories`]) and checked ([`check`]) for overlapping holders,
//! fencing-token duplicates and inversions, and stale writes accepted by the
//! fencing store; the [`Report`] can be rendered as a Markdown table row
//! ([`report::markdown_row`]).

#![warn(missing_docs)]

pub mod checker;
pub mod history;
pub mod report;
pub mod store;

pub use checker::{check, CheckError, CheckOptions, Leftovers, Mode, Report};
pub use history::{now_ns, read_histories, Event, EventKind, HistoryError, HistoryWriter};
pub use store::{FencedStore, FENCED_WRITE_LUA};
