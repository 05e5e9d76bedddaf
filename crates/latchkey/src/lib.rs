// The crate's README is the repository's (a link, which `cargo package` stores as a file).
#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]
#![forbid(unsafe_code)]

pub mod blocking;
mod client;
mod client_info;
mod codec;
mod conn;
mod connect;
mod election;
mod error;
mod fair_lock;
mod guard;
mod inspect;
mod keys;
mod latch;
mod lock;
mod metrics;
mod multi_lock;
mod permit_semaphore;
mod pubsub;
mod queue;
mod rate_limit;
mod redlock;
mod replica;
mod rwlock;
#[cfg(feature = "scheduler")]
mod scheduler;
mod scripts;
mod semaphore;
mod sentinel_watch;
mod stall;
mod task;
mod wait;
mod watchdog;

#[cfg(test)]
mod layers_test;

/// The redis-rs crate latchkey is built on, so that the application's own client
/// ([`ClientBuilder::from_redis_client`], [`ClientBuilder::from_cluster_client`]) is always of
/// the version latchkey takes.
pub use redis;

/// The time-zone database of [`Schedule::in_time_zone`] (the chrono-tz crate), re-exported so
/// that its version always matches.
#[cfg(feature = "scheduler")]
pub use chrono_tz;
pub use client::{Client, ClientBuilder};
pub use client_info::ClientInfo;
pub use codec::{Codec, Json};
pub use election::{Election, Leader, Leadership};
pub use error::{Error, Refused, Result};
pub use fair_lock::{FairLock, FairLockGuard};
pub use guard::{FencingToken, Guard, Lost};
pub use inspect::{Inspection, Kind, LeasedPermit, RwMode};
pub use keys::MAX_NAME_LEN;
pub use latch::CountDownLatch;
pub use lock::{Holder, Lock, LockGuard, LockOptions, LockStatus};
pub use multi_lock::{MultiLock, MultiLockGuard};
pub use permit_semaphore::{LeasedPermits, PermitId, PermitOptions, PermitSemaphore};
pub use queue::{
    Ack, BlockingQueue, DeadLetter, DelayedQueue, Delivery, ItemId, Nack, PendingItem,
};
#[cfg(feature = "tower")]
pub use rate_limit::{
    FailPolicy, RateLimitError, RateLimitLayer, RateLimitService, RateLimited, ResponseFuture,
};
pub use rate_limit::{GcraLimiter, Quota, RateConfig, RateDecision, RateLimiter, RateType};
pub use redlock::{RedLock, RedLockBuilder, RedLockGuard};
pub use replica::ReplicaSync;
pub use rwlock::{ReadGuard, ReadLock, RwLock, WriteGuard, WriteLock};
#[cfg(feature = "scheduler")]
pub use scheduler::{JobInfo, JobOptions, JobRun, Missed, Overlap, Run, Schedule, Scheduler};
pub use semaphore::{Permits, Semaphore};
pub use watchdog::MAX_LEASE;
