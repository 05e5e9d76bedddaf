//! What latchkey records through the [`metrics`] facade, and its tracing spans: the metric
//! names (documented in `docs/metrics.md`), the labels, and one-line recording helpers for the
//! cores that record them (the wait loop, the guard core, the watchdog, the pub/sub hub, the
//! queues).
//!
//! Nothing here talks to Redis. Without an installed recorder every helper is a few label
//! values built on the stack and a call into the no-op recorder; without an enabled `tracing`
//! subscriber a span is a disabled `Span` (no field is formatted).

use std::sync::Arc;
use std::time::Duration;

use metrics::{counter, gauge, histogram, Label};

/// Acquire calls that ended, by `primitive` and `outcome` (`acquired`, `timeout`, `error`).
pub(crate) const ACQUIRES: &str = "latchkey_acquires_total";
/// Acquire calls whose first attempt found the primitive taken, by `primitive`.
pub(crate) const CONTENDED: &str = "latchkey_acquires_contended_total";
/// Time from an acquire call to its end, by `primitive` and `outcome`.
pub(crate) const ACQUIRE_DURATION: &str = "latchkey_acquire_duration_seconds";
/// Time a contended acquire waited (first refusal to its end), by `primitive` and `outcome`.
pub(crate) const WAIT_DURATION: &str = "latchkey_acquire_wait_seconds";
/// Time from a grant to the release of the hold, by `primitive`.
pub(crate) const HOLD_DURATION: &str = "latchkey_hold_duration_seconds";
/// Holds found lost by the watchdog, by `primitive` and `reason` (`gone`, `expired`).
pub(crate) const LOST: &str = "latchkey_holds_lost_total";
/// Holds renewed (or checked) by the watchdog, by `primitive`.
pub(crate) const RENEWALS: &str = "latchkey_watchdog_renewals_total";
/// Holds whose renewal call failed, by `primitive`.
pub(crate) const RENEWAL_FAILURES: &str = "latchkey_watchdog_renewal_failures_total";
/// Wake-one hand-offs, by `event` (`received`, `passed_on`).
pub(crate) const HANDOFFS: &str = "latchkey_handoffs_total";
/// Runs of scheduled jobs, by `outcome` (`ok`, `failed`, `timed_out`, `panicked`, `lost`).
#[cfg(feature = "scheduler")]
pub(crate) const JOB_RUNS: &str = "latchkey_job_runs_total";
/// How long after its due time an occurrence was claimed.
#[cfg(feature = "scheduler")]
pub(crate) const JOB_LATENESS: &str = "latchkey_job_lateness_seconds";
/// How long a job's runs took, by `outcome`.
#[cfg(feature = "scheduler")]
pub(crate) const JOB_DURATION: &str = "latchkey_job_duration_seconds";
/// Reconnections of the pub/sub connection.
pub(crate) const PUBSUB_RECONNECTS: &str = "latchkey_pubsub_reconnects_total";
/// Channels subscribed again (after a reconnection, or after the server ended them).
pub(crate) const PUBSUB_RESUBSCRIPTIONS: &str = "latchkey_pubsub_resubscriptions_total";
/// Items offered to a queue.
pub(crate) const QUEUE_OFFERED: &str = "latchkey_queue_offered_total";
/// Items handed to a consumer, by `mode` (`pop`, `claim`).
pub(crate) const QUEUE_DELIVERED: &str = "latchkey_queue_delivered_total";
/// Reliable deliveries of an item delivered before (attempt 2 and later).
pub(crate) const QUEUE_REDELIVERED: &str = "latchkey_queue_redelivered_total";
/// Deliveries whose visibility timeout ran out, moved back to the ready list.
pub(crate) const QUEUE_EXPIRED: &str = "latchkey_queue_visibility_expired_total";
/// Deliveries acknowledged, by `outcome` (`finished`, `already_finished`).
pub(crate) const QUEUE_ACKED: &str = "latchkey_queue_acked_total";
/// Items moved to the dead-letter hash.
pub(crate) const QUEUE_DEAD_LETTERED: &str = "latchkey_queue_dead_lettered_total";
/// How late delayed items became ready: transfer time minus due time (server clock).
pub(crate) const QUEUE_LATENESS: &str = "latchkey_queue_lateness_seconds";
/// Items in a queue, by `state` (`ready`, `delayed`, `unacked`), as of the last transfer.
pub(crate) const QUEUE_DEPTH: &str = "latchkey_queue_depth";
/// Permits a rate limiter admitted, by `primitive` (`rate_limiter`, `gcra_limiter`).
pub(crate) const RATE_ADMITTED: &str = "latchkey_rate_limit_admitted_total";
/// Rate-limited calls that ended without their permits, by `primitive`.
pub(crate) const RATE_REFUSED: &str = "latchkey_rate_limit_refused_total";
/// Time a rate-limited call waited for room (first refusal to its end), by `primitive` and
/// `outcome` (`admitted`, `refused`, `error`).
pub(crate) const RATE_WAIT: &str = "latchkey_rate_limit_wait_seconds";

/// The `primitive` label of a hold kind of the registry (`HoldKey::kind`).
pub(crate) fn primitive_of_kind(kind: &'static str) -> &'static str {
    match kind {
        "rw_read" => "read_lock",
        "rw_write" => "write_lock",
        "permit" => "permit_semaphore",
        other => other,
    }
}

/// Extra labels of a metric: `(label, value)` pairs.
type Extra<'a> = &'a [(&'static str, &'static str)];

/// Where a metric is recorded: the primitive, and its name when the client opted in to the
/// name label ([`ClientBuilder::metrics_name_label`](crate::ClientBuilder::metrics_name_label)).
#[derive(Clone, Debug)]
pub(crate) struct Site {
    pub(crate) primitive: &'static str,
    pub(crate) name: Option<Arc<str>>,
}

impl Site {
    /// The site of `primitive` called `name` on `client`.
    pub(crate) fn new(client: &crate::Client, primitive: &'static str, name: &str) -> Site {
        Site::with(client.inner.config.metrics_name_label, primitive, name)
    }

    /// The site of `primitive` called `name`, with the name label if `name_label`.
    pub(crate) fn with(name_label: bool, primitive: &'static str, name: &str) -> Site {
        Site {
            primitive,
            name: name_label.then(|| Arc::from(name)),
        }
    }

    /// The labels: `primitive`, `name` if opted in, then `extra`.
    fn labels(&self, extra: Extra<'_>) -> Vec<Label> {
        let mut labels = Vec::with_capacity(2 + extra.len());
        if !self.primitive.is_empty() {
            labels.push(Label::new("primitive", self.primitive));
        }
        if let Some(name) = &self.name {
            labels.push(Label::new("name", name.clone()));
        }
        labels.extend(extra.iter().map(|(k, v)| Label::new(*k, *v)));
        labels
    }

    /// Adds `n` to counter `metric`.
    pub(crate) fn count(&self, metric: &'static str, extra: Extra<'_>, n: u64) {
        counter!(metric, self.labels(extra)).increment(n);
    }

    /// Records `value` in histogram `metric`.
    pub(crate) fn observe(&self, metric: &'static str, extra: Extra<'_>, value: Duration) {
        histogram!(metric, self.labels(extra)).record(value.as_secs_f64());
    }

    /// Sets gauge `metric` to `value`.
    pub(crate) fn set(&self, metric: &'static str, extra: Extra<'_>, value: f64) {
        gauge!(metric, self.labels(extra)).set(value);
    }

    /// A queue's site: no `primitive` label (both queue types share one queue).
    pub(crate) fn queue(name_label: bool, name: &str) -> Site {
        Site::with(name_label, "", name)
    }
}

/// A counter without labels.
pub(crate) fn count(metric: &'static str, extra: Extra<'_>, n: u64) {
    Site::with(false, "", "").count(metric, extra, n);
}

/// How an acquire ended, for the `outcome` label and the span's `outcome` field.
pub(crate) fn outcome<G, E>(result: &Result<Option<G>, E>) -> &'static str {
    match result {
        Ok(Some(_)) => "acquired",
        Ok(None) => "timeout",
        Err(_) => "error",
    }
}

/// The operations that have a span (`Op`), each with its span's name: one `tracing` call site
/// each (a span's name is static), in [`span`].
macro_rules! ops {
    ($($op:ident => $name:literal,)+) => {
        /// An operation that has a span.
        #[derive(Clone, Copy, Debug)]
        pub(crate) enum Op {
            $($op,)+
        }

        /// The debug-level span of one public operation, with the fields `primitive`, `name`,
        /// `wait` (when the operation waits a bounded time), and `token` and `outcome`, recorded
        /// when known. Disabled (and nothing formatted) when no subscriber wants debug spans of
        /// latchkey.
        pub(crate) fn span(
            op: Op,
            primitive: &'static str,
            name: &str,
            wait: Option<Duration>,
        ) -> tracing::Span {
            let wait = wait.map(tracing::field::debug);
            let empty = tracing::field::Empty;
            match op {
                $(Op::$op => tracing::debug_span!(
                    $name, primitive, name, wait, token = empty, outcome = empty
                ),)+
            }
        }
    };
}

ops! {
    Lock => "lock",
    TryLock => "try_lock",
    LockWith => "lock_with",
    TryLockWith => "try_lock_with",
    Unlock => "unlock",
    Acquire => "acquire",
    TryAcquire => "try_acquire",
    Release => "release",
    CountDown => "count_down",
    Await => "await",
    Offer => "offer",
    Take => "take",
    Poll => "poll",
    Ack => "ack",
    Nack => "nack",
}

/// The span of an acquire (`acquire`, or `try_acquire` with the wait left before `deadline`).
pub(crate) fn acquire_span(
    primitive: &'static str,
    name: &str,
    deadline: Option<tokio::time::Instant>,
) -> tracing::Span {
    wait_span([Op::Acquire, Op::TryAcquire], primitive, name, deadline)
}

/// The span of `ops[0]`, or of `ops[1]` with the wait left before `deadline`.
fn wait_span(
    ops: [Op; 2],
    primitive: &'static str,
    name: &str,
    deadline: Option<tokio::time::Instant>,
) -> tracing::Span {
    let wait = deadline.map(|d| d.saturating_duration_since(tokio::time::Instant::now()));
    span(ops[usize::from(wait.is_some())], primitive, name, wait)
}

/// Runs the acquire `work` of a primitive that does not wait in the one wait loop (multi
/// locks, RedLock) in a `lock` or `try_lock` span (by whether there is a `deadline`), recording
/// its outcome there and in `latchkey_acquires_total` and `latchkey_acquire_duration_seconds`.
pub(crate) async fn lock_traced<G, E>(
    site: Site,
    deadline: Option<tokio::time::Instant>,
    name: &str,
    work: impl std::future::Future<Output = Result<Option<G>, E>>,
) -> Result<Option<G>, E> {
    let started = tokio::time::Instant::now();
    let span = wait_span([Op::Lock, Op::TryLock], site.primitive, name, deadline);
    let done = tracing::Instrument::instrument(work, span.clone()).await;
    let outcome = outcome(&done);
    span.record("outcome", outcome);
    site.count(ACQUIRES, &[("outcome", outcome)], 1);
    site.observe(ACQUIRE_DURATION, &[("outcome", outcome)], started.elapsed());
    done
}

/// Runs `work` in `span`, then records its outcome there: `ok`, or `error` (for operations
/// whose work records no outcome of its own).
pub(crate) async fn traced<T, E>(
    span: tracing::Span,
    work: impl std::future::Future<Output = Result<T, E>>,
) -> Result<T, E> {
    let done = tracing::Instrument::instrument(work, span.clone()).await;
    span.record("outcome", if done.is_ok() { "ok" } else { "error" });
    done
}

/// Records `outcome` on the current span (the operation's span, which the latchkey call runs
/// in; a no-op when it is disabled or has no such field).
pub(crate) fn record_outcome(outcome: &'static str) {
    tracing::Span::current().record("outcome", outcome);
}

#[cfg(test)]
#[path = "metrics_tests.rs"]
mod tests;
