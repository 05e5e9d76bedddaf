//! Rate limiters: [`RateLimiter`], Redisson's sliding window (`RRateLimiter`'s layout, shared
//! with Java services), and [`GcraLimiter`], one small key per limited entity for per-key
//! limits at any rate. With the `tower` feature, `RateLimitLayer` puts a `GcraLimiter` in front
//! of a tower service (an axum router), one key per request.
//!
//! What they share is here: the wait for room (sleep until the time the server said room comes
//! back, plus jitter; no pub/sub, since a window opens with time rather than with a release),
//! and the metrics and spans of a decision.

mod gcra;
#[cfg(feature = "tower")]
mod layer;
mod rate_limiter;

pub use gcra::{GcraLimiter, Quota, RateDecision};
#[cfg(feature = "tower")]
pub use layer::{
    FailPolicy, RateLimitError, RateLimitLayer, RateLimitService, RateLimited, ResponseFuture,
};
pub use rate_limiter::{RateConfig, RateLimiter, RateType};

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

use crate::error::Result;
use crate::metrics::{self, Site};

/// What one decision of a rate limiter came to.
enum Turn<A, R> {
    /// The permits were taken.
    Admitted(A),
    /// Too few permits now: room comes back after `retry_after` (by the server clock), unless
    /// somebody gives permits back first.
    Refused { retry_after: Duration, refusal: R },
}

/// The longest jitter added to a wait. Waiters that were refused at the same moment are told
/// the same time; the jitter spreads their next attempts a little so that they do not reach
/// Redis in one burst (those that lose find the next time in their answer).
const MAX_JITTER: Duration = Duration::from_millis(20);

/// `wait` plus a random jitter of up to a tenth of it (at least 1 ms, at most [`MAX_JITTER`]).
fn jittered(wait: Duration) -> Duration {
    let bound = (wait / 10).clamp(Duration::from_millis(1), MAX_JITTER);
    let micros = u64::try_from(bound.as_micros()).unwrap_or(u64::MAX);
    wait + Duration::from_micros(rand::random_range(0..=micros))
}

/// Runs `attempt` until it admits (`Ok(Ok(_))`) or the room would come back after `deadline`
/// (`Ok(Err(refusal))`, at once: it does not sleep out a wait that cannot succeed in time).
/// Between attempts it sleeps until the time the refusal gave, plus jitter: one script call per
/// time room comes back, never a poll. `deadline` `None` waits as long as it takes. The outcome
/// is recorded in `meter` (and on the current span), the wait included, unless the future is
/// dropped.
async fn until_admitted<A, R, F, Fut>(
    meter: &Meter,
    permits: u32,
    deadline: Option<Instant>,
    mut attempt: F,
) -> Result<Result<A, R>>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Turn<A, R>>>,
{
    let mut refused_at = None;
    let result = loop {
        match attempt().await {
            Err(err) => break Err(err),
            Ok(Turn::Admitted(admitted)) => break Ok(Ok(admitted)),
            Ok(Turn::Refused {
                retry_after,
                refusal,
            }) => {
                let now = Instant::now();
                let Some(back) = now.checked_add(retry_after) else {
                    break Ok(Err(refusal));
                };
                if deadline.is_some_and(|d| back > d) {
                    break Ok(Err(refusal));
                }
                refused_at.get_or_insert(now);
                let wake = now + jittered(retry_after);
                tokio::time::sleep_until(deadline.map_or(wake, |d| wake.min(d))).await;
            }
        }
    };
    meter.record(&result, permits, refused_at);
    result
}

/// Where a rate limiter records its decisions: `latchkey_rate_limit_admitted_total`,
/// `latchkey_rate_limit_refused_total`, `latchkey_rate_limit_wait_seconds`.
#[derive(Clone, Debug)]
struct Meter {
    site: Site,
}

impl Meter {
    /// Records how a call for `permits` ended, and how long it waited if it was refused at
    /// `refused_at`; the outcome goes on the current span too.
    fn record<A, R>(
        &self,
        result: &Result<Result<A, R>>,
        permits: u32,
        refused_at: Option<Instant>,
    ) {
        let outcome = match result {
            Ok(Ok(_)) => {
                self.site
                    .count(metrics::RATE_ADMITTED, &[], u64::from(permits));
                "admitted"
            }
            Ok(Err(_)) => {
                self.site.count(metrics::RATE_REFUSED, &[], 1);
                "refused"
            }
            Err(_) => "error",
        };
        metrics::record_outcome(outcome);
        if let Some(refused_at) = refused_at {
            self.site.observe(
                metrics::RATE_WAIT,
                &[("outcome", outcome)],
                refused_at.elapsed(),
            );
        }
    }
}

#[cfg(test)]
#[path = "tests.rs"]
mod tests;
