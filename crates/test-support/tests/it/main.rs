//! Integration tests of latchkey-test-support against real Redis processes.

mod cluster;
mod proxy;
mod sentinel;
mod server;
mod tls;

use std::time::Duration;

use redis::AsyncConnectionConfig;

/// An async connection config with a generous connection timeout and the given response
/// timeout.
pub fn config(response_timeout: Duration) -> AsyncConnectionConfig {
    AsyncConnectionConfig::new()
        .set_connection_timeout(Some(Duration::from_secs(10)))
        .set_response_timeout(Some(response_timeout))
}

/// Polls `check` every 20 ms until it returns true; panics with `what` after `timeout`.
pub fn eventually(timeout: Duration, what: &str, mut check: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + timeout;
    while !check() {
        assert!(
            std::time::Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}
