//! Test support for latchkey: real `redis-server`, Redis Cluster and Sentinel processes on
//! the loopback interface, TLS material made with the `openssl` CLI, and a fault-injecting
//! TCP proxy.
//!
//! Everything here manages processes synchronously (plain `std` threads and blocking calls),
//! so it works the same from a `#[test]`, a current-thread `#[tokio::test]` or a multi-thread
//! runtime. Only `127.0.0.1` is ever used.
//!
//! * [`RedisServer`] — one `redis-server` child process, configured with [`ServerBuilder`].
//! * [`RedisServers`] — several independent servers (for Redlock-style tests).
//! * [`RedisCluster`] — a Redis Cluster made with `redis-cli --cluster create`.
//! * [`SentinelGroup`] — a primary, its replicas and `redis-sentinel` processes.
//! * [`TlsFiles`] — a throw-away CA with server and client certificates.
//! * [`FaultProxy`] — a TCP proxy that can delay, black-hole, drop or refuse connections.
//! * [`free_port`] — a free loopback port whose cluster bus port (`port + 10000`) is free too.
//! * [`eventually`] — polls an async check until it holds (a hang guard, not a timing assertion).
//!
//! Every child process is killed and reaped when its owner is dropped, and is also killed by
//! the kernel (`PR_SET_PDEATHSIG`) if the test process dies without running destructors.
//! When a test panics, dropping a server prints the tail of its log to stderr.
//!
//! The binaries are found on `PATH`: `redis-server`, `redis-sentinel` and `redis-cli`, or with
//! `LATCHKEY_TEST_SERVER=valkey` Valkey's `valkey-server`, `valkey-sentinel` and `valkey-cli`
//! ([`Family`]); the environment variables `LATCHKEY_REDIS_SERVER`, `LATCHKEY_REDIS_SENTINEL`
//! and `LATCHKEY_REDIS_CLI` override them one by one.
#![warn(missing_docs)]

mod cluster;
mod port;
mod process;
mod proxy;
mod sentinel;
mod server;
mod tls;
mod util;
mod wait;

pub use cluster::RedisCluster;
pub use port::free_port;
pub use proxy::FaultProxy;
pub use sentinel::SentinelGroup;
pub use server::{RedisServer, RedisServers, ServerBuilder};
pub use tls::{install_crypto_provider, TlsFiles};
pub use util::Family;
pub use wait::eventually;
