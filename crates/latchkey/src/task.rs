//! Background work: scripts that must run even if nobody waits for them.
//!
//! [`detached`] runs a future that finishes even if its caller goes away, so that a caller who
//! goes away cannot strand a hold. The client's task queue ([`start`]) runs the [`Task`]s handed to it: the releases of
//! dropped guards, the clean-up of waiters that gave up, the undoing of grants.

use std::any::Any;
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use futures_util::future::BoxFuture;
use tokio::sync::mpsc::{self, UnboundedReceiver};
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::conn::Conn;
use crate::error::{lock, Error, Result};

/// Runs `work` to completion even if the returned future is dropped.
///
/// The returned future polls `work` in the caller's task, as any future would. If it is dropped
/// after its first poll and before `work` has finished, its drop spawns what is left of `work`
/// onto the runtime that polled it, where it finishes and its output is dropped. Acquire paths
/// use it so that a caller who goes away cannot strand a hold: the output is a guard, and
/// dropping the guard releases the hold; release paths use it so that a release that was
/// started is finished. A future dropped before its first poll started nothing and drops `work`
/// unrun.
///
/// Polling in place, rather than spawning `work` at once, saves the usual operation a task, its
/// join handle and two scheduler hops (about a sixth of the client's instructions per
/// lock+unlock pair, measured with callgrind); only a cancelled operation pays for a spawn.
/// Like any future, `work` makes progress only while it is polled: a caller that keeps a
/// started operation without polling it holds up its answer (and a hold it was granted, which
/// the watchdog learns of only then). A panic in `work` reaches the caller.
///
/// `work` is boxed (a `dyn Future`), so the caller's future type does not nest `work`'s
/// (deeply nested driver futures would otherwise overflow the compiler's layout depth limit in
/// the crates that await our futures).
pub(crate) fn detached<T: Send + 'static>(work: BoxFuture<'static, T>) -> Detached<T> {
    Detached {
        work: Mutex::new(Some(work)),
        runtime: None,
        // The operation's span: what `work` records lands there, also once it is spawned.
        span: tracing::Span::current(),
    }
}

/// [`detached`] for `work` that may fail: its error and a closed client's come out as one.
/// A plain function (not an `async fn`, which would keep `work`, a `dyn Future` that is not
/// `Sync`, in its state before the first poll): the returned future holds only the `Sync`
/// [`Detached`].
pub(crate) fn detached_try<T: Send + 'static>(
    work: BoxFuture<'static, Result<T>>,
) -> impl Future<Output = Result<T>> + Send + Sync + 'static {
    let running = detached(work);
    async move { running.await? }
}

/// The future of [`detached`].
#[must_use = "futures do nothing unless polled"]
pub(crate) struct Detached<T: Send + 'static> {
    /// `None` once `work` has finished. In a mutex only to keep this future `Sync` (as the join
    /// handle it replaced was): it is reached through `&mut self` alone (`Mutex::get_mut`, no
    /// locking).
    work: Mutex<Option<BoxFuture<'static, T>>>,
    /// The runtime of the first poll (`None` before it, or outside one): where an unfinished
    /// `work` goes when this future is dropped.
    runtime: Option<tokio::runtime::Handle>,
    span: tracing::Span,
}

impl<T: Send + 'static> Future for Detached<T> {
    type Output = Result<T>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<T>> {
        let this = self.get_mut();
        // Out of `self` while it is polled: if `work` panics, it is dropped with the unwinding
        // stack instead of being spawned again by our drop.
        let slot = this.work.get_mut().unwrap_or_else(|e| e.into_inner());
        let Some(mut work) = slot.take() else {
            // Polled after it finished: a bug of ours, reported as a closed client rather
            // than a panic in the caller's task.
            return Poll::Ready(Err(Error::Closed));
        };
        if this.runtime.is_none() {
            // Outside a runtime, `work`'s drivers panic with Tokio's own message, as a spawn
            // would have.
            this.runtime = tokio::runtime::Handle::try_current().ok();
        }
        match work.as_mut().poll(cx) {
            Poll::Ready(output) => Poll::Ready(Ok(output)),
            Poll::Pending => {
                *this.work.get_mut().unwrap_or_else(|e| e.into_inner()) = Some(work);
                Poll::Pending
            }
        }
    }
}

impl<T: Send + 'static> Drop for Detached<T> {
    fn drop(&mut self) {
        let work = self
            .work
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let (Some(work), Some(runtime)) = (work, self.runtime.take()) {
            // Spawning never blocks; on a runtime that is shutting down the task is dropped
            // unrun, as every other task there.
            drop(runtime.spawn(tracing::Instrument::instrument(
                work,
                std::mem::replace(&mut self.span, tracing::Span::none()),
            )));
        }
    }
}

/// Work handed to the background task: a script to run once, for a guard dropped without an
/// explicit release (or an acquire whose caller went away).
#[derive(Debug)]
pub(crate) struct Task {
    pub(crate) script: &'static redis::Script,
    pub(crate) keys: Vec<Arc<str>>,
    pub(crate) args: Vec<String>,
    /// What is being done, for the log if it fails.
    pub(crate) context: &'static str,
    /// What a failure leaves behind, for the warning when the task fails in the background;
    /// `None` for a hold that expires with its lease anyway.
    pub(crate) lost: Option<String>,
    /// Sent again while Redis cannot be reached, for up to [`RESEND_FOR`] while the client lives
    /// (see `run_task`): a release or a queue entry stranded by a restart of Redis would
    /// otherwise stand until its lease or deadline ran out, holding everybody else up. Every
    /// task only undoes what one owner id (permit id, delivery attempt) made, so a second
    /// sending finds nothing left to do — but for a count (a plain semaphore's release, a GCRA
    /// refund) and a client's place in a wait queue (the hub's leave, see `pubsub`): those clear
    /// it.
    pub(crate) resend: bool,
}

impl Task {
    /// A script call: `script` with `keys` and `args`, doing `context` (for the log).
    pub(crate) fn new(
        script: &'static redis::Script,
        keys: Vec<Arc<str>>,
        args: Vec<String>,
        context: &'static str,
    ) -> Task {
        Task {
            script,
            keys,
            args,
            context,
            lost: None,
            resend: true,
        }
    }

    /// Runs the script on `conn` (EVALSHA, loaded on NOSCRIPT) and returns its reply; `name`
    /// names the object in errors.
    pub(crate) async fn run<T: redis::FromRedisValue + Send>(
        &self,
        conn: &Conn,
        name: &str,
    ) -> Result<T> {
        let keys: Vec<&str> = self.keys.iter().map(|k| &**k).collect();
        let args: Vec<&str> = self.args.iter().map(String::as_str).collect();
        conn.evalsha(self.script, &keys, &args, self.context, name)
            .await
    }

    /// Runs the script when the returned future is first polled; from then on it completes
    /// even if that future is dropped (see [`detached`]). Every explicit release goes through
    /// here, so a caller who stops waiting for `unlock()` still releases. A task that cannot
    /// reach Redis is also handed to `background`, which sends it again (see [`Task::resend`]);
    /// the caller gets the error.
    pub(crate) fn run_detached<T>(
        self,
        conn: &Conn,
        background: &mpsc::UnboundedSender<Task>,
        name: &str,
    ) -> impl Future<Output = Result<T>> + Send + 'static
    where
        T: redis::FromRedisValue + Send + 'static,
    {
        let (conn, background, name) = (conn.clone(), background.clone(), name.to_owned());
        detached_try(Box::pin(async move {
            let result = self.run::<T>(&conn, &name).await;
            if matches!(&result, Err(e) if self.resend && e.is_connection()) {
                let _ = background.send(self);
            }
            result
        }))
    }
}

/// A waiter's registration in Redis that outlives its attempt (a fair lock's queue entry, a
/// writer's pending mark): dropped while armed, it hands its clean-up to the background task.
pub(crate) struct LeaveOnDrop {
    background: mpsc::UnboundedSender<Task>,
    leave: Option<Task>,
}

impl LeaveOnDrop {
    /// `leave`, sent to `background` (the client's task queue) unless disarmed.
    pub(crate) fn new(background: &mpsc::UnboundedSender<Task>, leave: Task) -> LeaveOnDrop {
        LeaveOnDrop {
            background: background.clone(),
            leave: Some(leave),
        }
    }
}

impl Drop for LeaveOnDrop {
    fn drop(&mut self) {
        if let Some(task) = self.leave.take() {
            let _ = self.background.send(task);
        }
    }
}

/// The registration one acquire keeps across its attempts: left in Redis (see [`LeaveOnDrop`])
/// when this is dropped, unless the acquire was granted.
#[derive(Default)]
pub(crate) struct Place(Mutex<Option<LeaveOnDrop>>);

impl Place {
    /// Keeps the registration an attempt made, unless one is kept already: one owner has one
    /// place, so a later attempt's is the same one, disarmed (dropped armed, it would leave).
    pub(crate) fn keep_first(&self, made: Option<LeaveOnDrop>) {
        let mut kept = lock(&self.0);
        match made {
            Some(mut made) if kept.is_some() => made.leave = None,
            made => *kept = kept.take().or(made),
        }
    }

    /// The acquire was granted: its script removed the registration already.
    pub(crate) fn disarm(&self) {
        if let Some(mut kept) = lock(&self.0).take() {
            kept.leave = None;
        }
    }
}

/// The task that runs the [`Task`]s sent to `rx`, until `shutdown`; then it finishes what was
/// sent, within the command timeout of `conn`.
pub(crate) async fn run(conn: Conn, mut rx: UnboundedReceiver<Task>, shutdown: CancellationToken) {
    let mut running = JoinSet::new();
    loop {
        tokio::select! {
            biased;
            task = rx.recv() => match task {
                Some(task) => {
                    running.spawn(run_task(conn.clone(), task));
                }
                None => break,
            },
            Some(_) = running.join_next(), if !running.is_empty() => {}
            _ = shutdown.cancelled() => break,
        }
    }
    // The client is gone: finish what was handed over, bounded by the command timeout.
    while let Ok(task) = rx.try_recv() {
        running.spawn(run_task(conn.clone(), task));
    }
    let deadline = Instant::now() + conn.timeout();
    while !running.is_empty() {
        if tokio::time::timeout_at(deadline, running.join_next())
            .await
            .is_err()
        {
            break;
        }
    }
}

/// How long the background task keeps sending a task again while Redis cannot be reached (a
/// restart, a failover, a network cut).
pub(crate) const RESEND_FOR: Duration = Duration::from_secs(60);

/// The longest pause between two sendings of a task.
const RESEND_PAUSE: Duration = Duration::from_secs(2);

async fn run_task(conn: Conn, task: Task) {
    let name = task.keys.first().map_or("", |k| &**k);
    let give_up = Instant::now() + RESEND_FOR;
    let mut pause = Duration::from_millis(100);
    let e = loop {
        match task.run::<redis::Value>(&conn, name).await {
            Ok(_) => return,
            Err(e) if task.resend && e.is_connection() && Instant::now() + pause < give_up => {
                tracing::debug!(key = %name, error = %e.chain(), "latchkey background {} failed; sending it again", task.context);
                // Jittered: the tasks an outage held up do not all come back at once.
                tokio::time::sleep(pause.mul_f64(rand::random_range(0.5..1.5))).await;
                pause = (pause * 2).min(RESEND_PAUSE);
            }
            Err(e) => break e,
        }
    };
    match &task.lost {
        Some(lost) => {
            tracing::warn!(key = %name, error = %e.chain(), "latchkey background {} failed; {lost}", task.context)
        }
        // Nothing to act on: what it would have undone expires with its lease or deadline.
        None => {
            tracing::info!(key = %name, error = %e.chain(), "latchkey background {} failed; it expires with its lease", task.context)
        }
    }
}

/// A client's long-running background agents (the queues' transfer agents), one per name: the
/// state an agent shares with the handles that use it. Each lives as long as its task, which
/// removes its entry when it stops; the client's shutdown stops them all.
#[derive(Default)]
pub(crate) struct Agents(Mutex<HashMap<String, Arc<dyn Any + Send + Sync>>>);

impl Agents {
    /// The shared state of the agent called `name`, or the one `start` makes (and whose task it
    /// starts) if none runs.
    pub(crate) fn get_or_start<S: Any + Send + Sync>(
        &self,
        name: &str,
        start: impl FnOnce() -> Arc<S>,
    ) -> Arc<S> {
        let mut agents = lock(&self.0);
        if let Some(running) = agents
            .get(name)
            .and_then(|a| a.clone().downcast::<S>().ok())
        {
            return running;
        }
        let started = start();
        agents.insert(name.to_owned(), started.clone());
        started
    }

    /// The agent `name` whose shared state is `shared` has stopped.
    pub(crate) fn stopped<S: Any + Send + Sync>(&self, name: &str, shared: &Arc<S>) {
        let mut agents = lock(&self.0);
        let ours = agents.get(name).is_some_and(|a| {
            a.clone()
                .downcast::<S>()
                .is_ok_and(|a| Arc::ptr_eq(&a, shared))
        });
        if ours {
            agents.remove(name);
        }
    }
}
