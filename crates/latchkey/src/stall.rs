//! Waiting through a Redis stall: what a wait loop does when one of its steps times out.
//!
//! A stalled server (`CLIENT PAUSE`, a long-running script, a slow disk under `appendfsync
//! always`) answers nothing for a while; each command then fails with the command timeout
//! ([`Error::Timeout`]). A waiter whose wait has time left keeps waiting through such a stall:
//! it pauses briefly and tries again, within its deadline. Only steps that are safe to repeat
//! are retried (see each primitive's wait docs); the others return the error as before.

use std::time::Duration;

use tokio::time::Instant;

use crate::error::{Error, Result};

/// The pause before a step that timed out is tried again.
pub(crate) const STALL_RETRY_PAUSE: Duration = Duration::from_millis(100);

/// After a step of a wait loop failed with `err`: `Ok(())` once it may be tried again — `err`
/// is a command timeout and the wait has time left, and a short pause (never past `deadline`)
/// has passed — or `Err(err)`.
pub(crate) async fn pause_before_retry(err: Error, deadline: Option<Instant>) -> Result<()> {
    if !err.is_uncertain() {
        return Err(err);
    }
    let now = Instant::now();
    let mut until = now + STALL_RETRY_PAUSE;
    if let Some(deadline) = deadline {
        if now >= deadline {
            return Err(err);
        }
        until = until.min(deadline);
    }
    tracing::debug!(error = %err, "latchkey waiter retries after a command timeout");
    tokio::time::sleep_until(until).await;
    Ok(())
}
