#![doc = include_str!("../../../README.md")]
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]
#![forbid(unsafe_code)]

mod client;
mod conn;
mod error;
mod lock;
mod pubsub;
mod scripts;
mod task;
mod watchdog;

pub use client::{Client, ClientBuilder, MAX_LEASE, MAX_NAME_LEN, MIN_WATCHDOG_TIMEOUT};
pub use error::{Error, Result};
pub use lock::{Holder, Lock, LockGuard, LockOptions, LockStatus};
