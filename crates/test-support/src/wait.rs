//! Waiting in tests for something that happens in the background (an expiry, a wake-up).

use std::future::Future;
use std::time::{Duration, Instant};

/// Polls `check` every 20 ms until it returns `true` (then `true`) or `within` has passed
/// (then `false`, after one last check). A hang guard for behaviour that happens in the
/// background, never a timing assertion: give it a generous `within`.
///
/// ```no_run
/// # async fn f(conn: redis::aio::MultiplexedConnection) {
/// use std::time::Duration;
/// use redis::AsyncCommands;
///
/// let gone = latchkey_test_support::eventually(Duration::from_secs(5), || {
///     let mut conn = conn.clone();
///     async move { !conn.exists::<_, bool>("lock").await.unwrap() }
/// })
/// .await;
/// assert!(gone, "the lock expired");
/// # }
/// ```
pub async fn eventually<F, Fut>(within: Duration, mut check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + within;
    loop {
        if check().await {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
