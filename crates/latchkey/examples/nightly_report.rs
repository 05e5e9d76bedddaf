//! A nightly report that runs on exactly one node of a fleet.
//!
//! Every node of a service registers the same job and runs the scheduler; each occurrence is
//! claimed by one node on the Redis server's clock, so the report is written once, not once
//! per node, and a node that dies mid-report has it retried by another one with a higher
//! fencing token. Here three nodes of one "fleet" share a process.
//!
//! The real schedule is `0 0 2 * * *` (02:00:00 every day); so that the example finishes in
//! seconds it runs every two seconds unless `REPORT_SCHEDULE` says otherwise.
//!
//! Run: `cargo run -p latchkey-redis --features scheduler --example nightly_report` (uses
//! `REDIS_URL`, default `redis://127.0.0.1:6379`).

mod support;

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use latchkey_redis::{Client, JobOptions, Missed, Run, Schedule};

const NAMESPACE: &str = "latchkey-example-nightly_report";
const REPORTS: usize = 3;

/// The reports written, by any node: (node, due time in Unix seconds, fencing token).
type Written = Arc<Mutex<Vec<(usize, u64, u64)>>>;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = support::redis_url();
    let outcome = run(&url).await;
    support::clean_up(&url, NAMESPACE).await?;
    outcome
}

async fn run(url: &str) -> Result<(), Box<dyn std::error::Error>> {
    let expression =
        std::env::var("REPORT_SCHEDULE").unwrap_or_else(|_| "*/2 * * * * *".to_owned());
    let written: Written = Arc::default();
    let (stop, _) = tokio::sync::broadcast::channel::<()>(1);
    let mut nodes = Vec::new();
    for node in 0..3 {
        let client = Client::builder(url).namespace(NAMESPACE).connect().await?;
        let scheduler = client.scheduler("reports");
        let written = written.clone();
        scheduler.job(
            "nightly",
            Schedule::cron(&expression)?,
            // A report missed while every node was down is written once when one comes back.
            JobOptions::new().missed(Missed::RunOnce),
            move |run: Run| write_report(node, run, written.clone()),
        )?;
        let mut stop = stop.subscribe();
        nodes.push(tokio::spawn(async move {
            scheduler
                .run_until(async move {
                    let _ = stop.recv().await;
                })
                .await
                .map(|()| scheduler)
        }));
    }

    // Wait for the reports, then stop every node gracefully.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while written.lock().unwrap().len() < REPORTS {
        if tokio::time::Instant::now() > deadline {
            return Err("the reports were not written within 30 s".into());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    stop.send(())?;
    let mut schedulers = Vec::new();
    for node in nodes {
        schedulers.push(node.await??);
    }

    let written = written.lock().unwrap().clone();
    let mut due: Vec<u64> = written.iter().map(|&(_, due, _)| due).collect();
    due.sort_unstable();
    due.dedup();
    println!(
        "{} report(s) for {} due time(s): each written on exactly one node",
        written.len(),
        due.len()
    );
    if due.len() != written.len() {
        return Err("a report was written twice".into());
    }
    for job in schedulers[0].jobs().await? {
        println!(
            "job {} ({}): next due {:?}",
            job.name, job.schedule, job.next_due
        );
    }
    Ok(())
}

/// The report itself: a real one would query, render and upload, writing with the fencing
/// token so that a node paused past its lease cannot overwrite a newer report.
async fn write_report(node: usize, run: Run, written: Written) -> Result<(), String> {
    let due = run
        .due()
        .duration_since(UNIX_EPOCH)
        .map_err(|e| e.to_string())?
        .as_secs();
    let late = SystemTime::now()
        .duration_since(run.due())
        .unwrap_or_default();
    println!(
        "node {node}: report due at {due} (attempt {}, fencing token {}, {} ms late)",
        run.attempt(),
        run.fencing_token(),
        late.as_millis()
    );
    tokio::time::sleep(Duration::from_millis(200)).await;
    if run.is_lost() {
        return Err("the claim was lost; another node retries this report".into());
    }
    written
        .lock()
        .unwrap()
        .push((node, due, run.fencing_token().get()));
    Ok(())
}
