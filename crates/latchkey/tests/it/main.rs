//! latchkey's integration tests, in one binary: every test runs against real `redis-server`,
//! Redis Cluster and Sentinel processes of its own (spawned by `latchkey-test-support` on free
//! loopback ports), so the tests run in parallel on the default thread count. One module per
//! primitive or deployment; the helpers they share are in [`helpers`].
//!
//! Run one module with `cargo test -p latchkey --test it -- lock::`.

mod helpers;

mod acl;
mod auto_traits;
mod bad_input;
mod blocking;
mod blocking_queue;
mod cluster;
mod cluster_failover;
mod delayed_queue;
mod deployments;
mod election;
mod examples;
mod fair_lock;
mod from_client;
mod inspect;
mod latch;
mod lock;
mod metrics;
mod multi_lock;
mod queue_cluster;
mod rate_limit_layer;
mod rate_limiter;
mod redlock;
mod rwlock;
mod scheduler;
mod semantics;
mod semaphore;
