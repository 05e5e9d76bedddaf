//! The one wait loop every waiting primitive runs: attempt, subscribe before the retry, park
//! until a message or the hint the attempt gave (the holder's remaining lease), within the
//! deadline; wait through Redis stalls; hand a wake-up that was no use on.
//!
//! A primitive supplies its attempt (one script call, run detached so that a dropped caller
//! strands nothing: see `task::detached`) and says what an answer means with [`Attempt`]; everything else —
//! the order of subscribing and retrying that keeps a release from going unnoticed, how long
//! to park, when to give up — is here, once.

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

use crate::error::{Error, Result};
use crate::metrics::{self, Site};
use crate::pubsub::{Hub, WakePolicy};
use crate::stall::pause_before_retry;
use crate::task::Task;
use crate::watchdog::{check_lease, Lease};

/// The longest a waiter parks between attempts when nothing wakes it. Messages normally wake it
/// long before; this bounds the stall when one is lost or a hand-off went to a client that died.
pub(crate) const MAX_PARK: Duration = Duration::from_secs(2);

/// What one attempt came to.
pub(crate) enum Attempt<G> {
    /// Acquired: the loop returns it.
    Granted(G),
    /// Not acquired.
    Wait {
        /// Park at most this long before the next attempt (the holder's remaining lease, the
        /// next lease to end); `None` when there is no such hint.
        retry_after: Option<Duration>,
        /// Something was released but not enough for this request (semaphores): a wake-up that
        /// led here is passed on to the waiter queued behind, whose request may be smaller.
        short: bool,
    },
    /// The attempt timed out in a way that is safe to repeat: it is made again within the
    /// deadline (see [`pause_before_retry`]).
    Stalled(Error),
}

impl<G> Attempt<G> {
    /// Not acquired; retry within `ms` milliseconds at the latest (a negative value, as Redis
    /// gives for a key without expiry: no hint).
    pub(crate) fn retry_after_ms(ms: i64) -> Attempt<G> {
        Attempt::Wait {
            retry_after: u64::try_from(ms).ok().map(Duration::from_millis),
            short: false,
        }
    }
}

/// What the loop tells each attempt.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Turn {
    /// How long the caller will park before its next attempt if this one fails (zero: it will
    /// not wait). Scripts that register waiters use it as the registration's lifetime.
    pub(crate) park: Duration,
    /// Whether this waiter listens on the channel (it is in the client's local queue).
    pub(crate) subscribed: bool,
    /// How many other waiters of this client listen on the channel.
    pub(crate) others: usize,
}

impl Turn {
    /// What a grant does to this client's place in a wake-one wait queue (a lock's, an
    /// election's), as the acquire scripts take it: `"0"` leave it (no other waiter of the
    /// client), `"1"` stay (others still wait), `"2"` not in it (nobody of this client waits:
    /// no subscription, no other waiter).
    pub(crate) fn queue(&self) -> &'static str {
        match (self.others, self.subscribed) {
            (0, false) => "2",
            (0, true) => "0",
            _ => "1",
        }
    }
}

/// Where and how a primitive waits.
pub(crate) struct Waiting<'a> {
    pub(crate) hub: &'a Hub,
    /// The channel its releases publish on.
    pub(crate) channel: &'a str,
    pub(crate) policy: WakePolicy,
    /// The clean-up run when this client's last waiter on the channel goes away (the lock
    /// leaves its wait queue); `None` when there is nothing to clean up.
    pub(crate) on_leave: Option<&'a (dyn Fn() -> Task + Sync)>,
    /// The longest park between two attempts.
    pub(crate) max_park: Duration,
    /// Whether a wake-up this waiter got goes on to the next waiter when its attempt succeeds
    /// anyway (queues: the message announced another item than the one it found). Otherwise a
    /// grant consumes it (locks, semaphores: the release it announced was this grant).
    pub(crate) pass_on_unused_wake: bool,
    /// Where the acquire metrics of this wait are recorded (`latchkey_acquires_total`, …);
    /// `None` records nothing (queue consumers, which have metrics of their own).
    pub(crate) site: Option<Site>,
}

impl<'a> Waiting<'a> {
    /// Waiting on `channel` of `hub` with `policy`: parks of at most [`MAX_PARK`], nothing to
    /// clean up on leaving, wake-ups consumed by a grant.
    pub(crate) fn new(hub: &'a Hub, channel: &'a str, policy: WakePolicy) -> Waiting<'a> {
        Waiting {
            hub,
            channel,
            policy,
            on_leave: None,
            max_park: MAX_PARK,
            pass_on_unused_wake: false,
            site: None,
        }
    }

    /// Runs attempts until one is granted (`Ok(Some(_))`) or `deadline` has passed (`Ok(None)`;
    /// a deadline already past makes one attempt). Errors other than a repeatable stall end the
    /// wait.
    ///
    /// After a failed attempt the waiter subscribes and then tries again at once, so a release
    /// between the two is not missed; after that it parks until a message wakes it, the hint of
    /// the last attempt, [`Waiting::max_park`] or the deadline, whichever is first. A clone of a
    /// subscription this client already has is joined without I/O, and then the first attempt
    /// is already covered.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future drops the subscription (the hub forgets the waiter, and runs
    /// [`Waiting::on_leave`] if it was the client's last); attempts are detached by their
    /// callers, so a hold granted after the drop is released where it lands. A dropped
    /// wait records no metric.
    pub(crate) async fn run<G, F, Fut>(
        &self,
        deadline: Option<Instant>,
        attempt: F,
    ) -> Result<Option<G>>
    where
        F: FnMut(Turn) -> Fut,
        Fut: Future<Output = Result<Attempt<G>>>,
    {
        let started = Instant::now();
        let mut refused_at = None;
        let result = self.run_loop(deadline, attempt, &mut refused_at).await;
        if let Some(site) = &self.site {
            let outcome = metrics::outcome(&result);
            metrics::record_outcome(outcome);
            let labels = [("outcome", outcome)];
            site.count(metrics::ACQUIRES, &labels, 1);
            site.observe(metrics::ACQUIRE_DURATION, &labels, started.elapsed());
            if let Some(refused_at) = refused_at {
                site.count(metrics::CONTENDED, &[], 1);
                site.observe(metrics::WAIT_DURATION, &labels, refused_at.elapsed());
            }
        }
        result
    }

    /// The loop of [`Waiting::run`]; sets `refused_at` at the first refused attempt.
    async fn run_loop<G, F, Fut>(
        &self,
        deadline: Option<Instant>,
        mut attempt: F,
        refused_at: &mut Option<Instant>,
    ) -> Result<Option<G>>
    where
        F: FnMut(Turn) -> Fut,
        Fut: Future<Output = Result<Attempt<G>>>,
    {
        let on_leave = || self.on_leave.map(|leave| leave());
        let will_wait = deadline.is_none_or(|d| d > Instant::now());
        let mut subscription = if will_wait {
            self.hub.try_join(self.channel, on_leave)
        } else {
            None
        };
        // Whether the last park ended with a message (rather than the time running out).
        let mut woken = false;
        loop {
            let subscribed = subscription.is_some();
            let park = self.park(deadline);
            let turn = Turn {
                park,
                subscribed,
                others: self
                    .hub
                    .waiters_on(self.channel)
                    .saturating_sub(usize::from(subscribed)),
            };
            let retry_after = match attempt(turn).await? {
                Attempt::Granted(granted) => {
                    // Dropped unfinished, a subscription hands a wake-up it got to the next
                    // waiter of this client.
                    if let Some(subscription) = subscription.filter(|_| !self.pass_on_unused_wake) {
                        subscription.finish();
                    }
                    return Ok(Some(granted));
                }
                Attempt::Wait { retry_after, short } => {
                    refused_at.get_or_insert_with(Instant::now);
                    if woken && short {
                        if let Some(subscription) = &subscription {
                            subscription.pass_on();
                        }
                    }
                    retry_after
                }
                Attempt::Stalled(err) => {
                    pause_before_retry(err, deadline).await?;
                    continue;
                }
            };
            let now = Instant::now();
            if deadline.is_some_and(|d| now >= d) {
                return Ok(None);
            }
            let Some(waiting) = &subscription else {
                // Subscribe, then retry at once. Subscribing changes nothing in Redis, so a
                // stalled server is waited through.
                match self
                    .hub
                    .subscribe(self.channel, self.policy, on_leave())
                    .await
                {
                    Ok(subscribed) => subscription = Some(subscribed),
                    Err(err) => pause_before_retry(err, deadline).await?,
                }
                woken = false;
                continue;
            };
            let park = retry_after.map_or(self.max_park, |hint| {
                hint.clamp(Duration::from_millis(1), self.max_park)
            });
            let until = deadline.map_or(now + park, |d| d.min(now + park));
            woken = waiting.wait_until(until).await;
        }
    }

    /// How long a waiter with this deadline may park between attempts (zero: it does not wait).
    fn park(&self, deadline: Option<Instant>) -> Duration {
        match deadline {
            None => self.max_park,
            Some(d) => d
                .saturating_duration_since(Instant::now())
                .min(self.max_park),
        }
    }
}

/// The deadline of a wait of `wait` from now, or the error for a wait too long for the clock
/// (`unbounded` names the call that waits without a limit, such as `` `lock()` ``).
pub(crate) fn deadline_after(wait: Duration, unbounded: &str) -> Result<Instant> {
    Instant::now().checked_add(wait).ok_or_else(|| {
        Error::invalid(
            "wait",
            format!("{wait:?} overflows the clock; use {unbounded} to wait without a limit"),
        )
    })
}

/// The lease and the deadline asked for by the options of an acquire (a fixed lease, a wait),
/// checked; `unbounded` names the call that waits without a limit (see [`deadline_after`]).
pub(crate) fn checked_options(
    lease: Option<Duration>,
    wait: Option<Duration>,
    unbounded: &str,
) -> Result<(Lease, Option<Instant>)> {
    let lease = match lease {
        Some(lease) => check_lease(lease).map(|_| Lease::Fixed(lease))?,
        None => Lease::Watchdog,
    };
    let deadline = wait
        .map(|wait| deadline_after(wait, unbounded))
        .transpose()?;
    Ok((lease, deadline))
}

/// What a wait without a deadline ended with: always a grant.
pub(crate) fn unbounded<G>(granted: Option<G>) -> G {
    granted.expect("an unbounded wait only ends with a grant")
}

/// What a wait for `name` that started at `started` ended with; running out of time is an
/// error ([`Error::WaitTimedOut`]).
pub(crate) fn or_timed_out<G>(
    granted: Option<G>,
    name: &str,
    started: std::time::Instant,
) -> Result<G> {
    granted.ok_or_else(|| Error::WaitTimedOut {
        name: name.to_owned(),
        waited: started.elapsed(),
    })
}

/// The error for a script reply of an unexpected shape.
pub(crate) fn unexpected(what: &'static str, reply: impl std::fmt::Debug) -> Error {
    Error::Redis(redis::RedisError::from((
        redis::ErrorKind::UnexpectedReturnType,
        what,
        format!("unexpected reply {reply:?}"),
    )))
}
