//! The worker of [`Primitive::Job`](super::Primitive::Job): a scheduler node whose one job
//! records every run as a hold.
//!
//! The worker registers job [`JOB_NAME`] in group [`WorkerConfig::lock_name`], every
//! [`WorkerConfig::job_interval_ms`] with the default options (one run of the job at a time,
//! [`latchkey_redis::Overlap::Skip`]), and runs the scheduler until one of the usual stop
//! conditions. The job's handler is the critical section:
//!
//! 1. at its start `AcquireInvoke` and `AcquireOk` with the run's fencing token (the claim was
//!    made by the scheduler just before);
//! 2. [`WorkerConfig::writes_per_hold`] fenced writes, as a lock worker's, whose values carry
//!    the occurrence's due time ([`job_write_value`]);
//! 3. `ReleaseInvoke` and `ReleaseOk` when it returns, or `LostSignal` when the run's claim
//!    is lost. The scheduler drops the run's future when the claim is lost; the loss is
//!    recorded then.
//!
//! The process id of the events is the client's id, which every claim's owner id starts with,
//! as for the locks; the history writer and the summary are shared with the handler's runs
//! behind a mutex.

use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, UNIX_EPOCH};

use latchkey_redis::{Client, Run};

use super::{
    adopt_handle, conclude, stop_file, BoxError, Ending, StoreClient, WorkerConfig, WorkerSummary,
    JOB_NAME,
};
use crate::history::{EventKind, HistoryWriter};

/// How long the scheduler lets the runs going on finish when the worker stops: longer than
/// any run of the suite.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// The value write `write` of the run recorded as acquire `op` of `process` writes to the
/// store: it names the occurrence by its due time, so that a check can tell which runs ran
/// which occurrence (see [`job_due_of`]).
pub fn job_write_value(process: &str, op: u64, write: u32, due_ms: u64) -> String {
    format!("{process}#{op}.{write} due {due_ms}")
}

/// The due time (Unix ms) a value of [`job_write_value`] carries.
pub fn job_due_of(value: &str) -> Option<u64> {
    value.rsplit_once(" due ")?.1.parse().ok()
}

/// What the worker's task and the runs of its job share.
struct Shared {
    config: WorkerConfig,
    store: StoreClient,
    state: Mutex<State>,
}

struct State {
    history: HistoryWriter,
    summary: WorkerSummary,
    /// The first failure to write the history: the worker stops and fails with it.
    failure: Option<String>,
}

impl Shared {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records `kind` for operation `op`, or for a new operation when `op` is `None`; returns
    /// the operation's id. A history that cannot be written stops the worker.
    fn record(&self, op: Option<u64>, kind: EventKind) -> Result<u64, String> {
        let mut state = self.state();
        let recorded = match op {
            Some(op) => state.history.record(op, kind),
            None => state.history.invoke(kind),
        };
        recorded.map(|event| event.op).map_err(|e| {
            let failure = format!("cannot record the history: {e}");
            state.failure.get_or_insert_with(|| failure.clone());
            failure
        })
    }

    /// Why the worker stops now, if it does.
    fn stop_reason(&self, deadline: tokio::time::Instant, stop: &Path) -> Option<&'static str> {
        let state = self.state();
        if state.failure.is_some() {
            Some("history failure")
        } else if state.summary.acquired >= self.config.max_acquires {
            Some("max_acquires")
        } else if state.summary.attempts >= self.config.max_attempts {
            Some("max_attempts")
        } else if tokio::time::Instant::now() >= deadline {
            Some("deadline")
        } else if stop.exists() {
            Some("stop file")
        } else {
            None
        }
    }
}

/// Runs the scheduler until the worker stops; returns its summary (also written to its
/// summary file).
pub(super) async fn run(
    config: WorkerConfig,
    client: Client,
    store: StoreClient,
    deadline: tokio::time::Instant,
) -> Result<WorkerSummary, BoxError> {
    let mut summary = WorkerSummary::default();
    let history = adopt_handle(&config, client.id().to_owned(), &mut summary)?;
    let shared = Arc::new(Shared {
        config: config.clone(),
        store,
        state: Mutex::new(State {
            history,
            summary,
            failure: None,
        }),
    });
    let scheduler = client.scheduler(config.lock_name.as_str());
    scheduler.shutdown_grace(SHUTDOWN_GRACE);
    let runs = shared.clone();
    scheduler.every(
        JOB_NAME,
        Duration::from_millis(config.job_interval_ms),
        move |run: Run| hold(runs.clone(), run),
    )?;
    let stop = stop_file(&config.dir);
    let mut reason = "";
    scheduler
        .run_until(async {
            loop {
                if let Some(why) = shared.stop_reason(deadline, &stop) {
                    reason = why;
                    return;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await?;
    let (mut summary, failure) = {
        let mut state = shared.state();
        (std::mem::take(&mut state.summary), state.failure.take())
    };
    if let Some(failure) = failure {
        return Err(failure.into());
    }
    summary.stopped_because = reason.to_owned();
    conclude(&config, &client, summary).await
}

/// The job's handler: one run, recorded as a hold.
async fn hold(shared: Arc<Shared>, run: Run) -> Result<(), String> {
    let token = run.fencing_token().get();
    let due_ms = run
        .due()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    shared.state().summary.attempts += 1;
    let op = shared.record(None, EventKind::AcquireInvoke)?;
    shared.record(
        Some(op),
        EventKind::AcquireOk {
            fencing_token: token,
        },
    )?;
    shared.state().summary.acquired += 1;
    let mut section = Section {
        shared,
        run,
        op,
        ended: false,
    };
    let ending = section.writes(token, due_ms).await?;
    section.ended = true;
    match ending {
        Ending::Done => {
            let release = section.shared.record(None, EventKind::ReleaseInvoke)?;
            section.shared.record(Some(release), EventKind::ReleaseOk)?;
            Ok(())
        }
        Ending::Lost => {
            section.shared.state().summary.lost += 1;
            section.shared.record(Some(op), EventKind::LostSignal)?;
            // The claim is gone (its `lost()` has fired): the scheduler drops this future,
            // as it does for every run that lost its claim, and records no outcome.
            std::future::pending().await
        }
    }
}

/// A run inside the handler, from its `AcquireOk` on. If the scheduler drops the run's
/// future before the handler recorded the run's end, dropping this records it.
struct Section {
    shared: Arc<Shared>,
    run: Run,
    /// The op id of the run's acquire.
    op: u64,
    /// Whether the run's end is recorded.
    ended: bool,
}

impl Drop for Section {
    fn drop(&mut self) {
        if self.ended {
            return;
        }
        // Dropped because the claim was lost, or, at a shutdown, because the grace ran out
        // (the run is handed back: a release whose answer nobody waits for).
        let recorded = if self.run.is_lost() {
            self.shared.state().summary.lost += 1;
            self.shared.record(Some(self.op), EventKind::LostSignal)
        } else {
            self.shared.record(None, EventKind::ReleaseInvoke)
        };
        if let Err(e) = recorded {
            eprintln!("worker {}: {e}", self.shared.config.worker);
        }
    }
}

impl Section {
    /// The run's fenced writes, as [`super::Worker::critical_section`] makes them.
    async fn writes(&self, token: u64, due_ms: u64) -> Result<Ending, String> {
        let config = &self.shared.config;
        let worker = config.worker;
        let careful = config.check_lost_before_write;
        let mut store = self.shared.store.clone();
        let process = self.shared.state().history.process().to_owned();
        for i in 0..config.writes_per_hold {
            if i > 0 {
                let pause = tokio::time::sleep(Duration::from_millis(config.write_interval_ms));
                if careful {
                    tokio::select! {
                        biased;
                        _ = self.run.lost() => return Ok(Ending::Lost),
                        _ = pause => {}
                    }
                } else {
                    pause.await;
                }
            }
            if careful && self.run.is_lost() {
                return Ok(Ending::Lost);
            }
            let value = job_write_value(&process, self.op, i, due_ms);
            let write = self.shared.record(
                None,
                EventKind::WriteInvoke {
                    token,
                    value: value.clone(),
                },
            )?;
            match store.write(token, &value).await {
                Ok(true) => {
                    self.shared.record(Some(write), EventKind::WriteOk)?;
                }
                Ok(false) => {
                    self.shared.record(Some(write), EventKind::WriteRejected)?;
                    self.shared.state().summary.rejected_writes += 1;
                    // A newer token was written: another node runs an occurrence now, so this
                    // run's claim is gone. The library must say so.
                    let wait = Duration::from_millis(config.lost_wait_ms);
                    return match tokio::time::timeout(wait, self.run.lost()).await {
                        Ok(()) => Ok(Ending::Lost),
                        Err(_) => {
                            self.shared.state().summary.lost_not_signalled += 1;
                            eprintln!(
                                "worker {worker}: the store refused token {token} but the run's \
                                 lost() did not fire within {wait:?}"
                            );
                            Ok(Ending::Done)
                        }
                    };
                }
                Err(e) => {
                    // The store is never faulted; leave the write without completion.
                    eprintln!("worker {worker}: store write failed: {e}");
                    return Ok(Ending::Done);
                }
            }
            if !careful && self.run.is_lost() {
                return Ok(Ending::Lost);
            }
        }
        Ok(Ending::Done)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_values_carry_the_due_time() {
        let value = job_write_value("client-1", 7, 2, 1_700_000_000_000);
        assert_eq!(value, "client-1#7.2 due 1700000000000");
        assert_eq!(job_due_of(&value), Some(1_700_000_000_000));
        assert_eq!(job_due_of("client-1#7.2"), None);
    }
}
