//! `latchkey list`: the locks, semaphores, rate limiters and job groups that exist.

use std::process::ExitCode;

use anyhow::{Context, Result};
use latchkey_redis::{Client, ClientInfo, Inspection, JobInfo, Kind, RateType};
use serde_json::json;

use crate::connect::{self, Target};
use crate::duration::{compact, human};
use crate::opt::ListOpt;

/// One name found, with what its row shows beyond the inspection.
struct Row {
    found: Inspection,
    /// A lock's first holder, or the node of a group's first running job, and what its client
    /// registered.
    first: Option<(String, Option<ClientInfo>)>,
    /// A job group's jobs.
    jobs: Vec<JobInfo>,
}

/// Lists the locks, semaphores, rate limiters and job groups whose names match the pattern,
/// with kind, holder count, lease and a detail. Names are found with SCAN (on every primary of
/// a cluster) and read one at a time; keys of other kinds are left out.
pub async fn run(opt: ListOpt) -> Result<ExitCode> {
    let target = Target::given_or_default(&opt.connect);
    let client = connect::client(&target.url, None).await?;
    let names = client
        .scan_names(&opt.pattern)
        .await
        .with_context(|| format!("scanning for names matching `{}`", opt.pattern))?;
    let mut found = Vec::new();
    for name in names {
        match client.inspect(&name).await {
            Ok(Some(inspection)) => {
                let jobs = match inspection.kind {
                    Kind::JobGroup => match client.scheduler(name.clone()).jobs().await {
                        Ok(jobs) => jobs,
                        Err(error) if error.is_wrong_type() => continue,
                        Err(error) => {
                            return Err(error)
                                .with_context(|| format!("reading the job group `{name}`"))
                        }
                    },
                    _ => Vec::new(),
                };
                let first = first_holder(&client, &inspection, &jobs).await;
                found.push(Row {
                    found: inspection,
                    first,
                    jobs,
                });
            }
            // Gone since the scan, or not a lock or semaphore.
            Ok(None) => {}
            Err(error) if error.is_wrong_type() || error.is_invalid_argument() => {}
            Err(error) => return Err(error).with_context(|| format!("reading `{name}`")),
        }
    }
    if opt.json {
        let rows: Vec<_> = found.iter().map(to_json).collect();
        println!("{}", serde_json::Value::Array(rows));
        return Ok(ExitCode::SUCCESS);
    }
    if found.is_empty() {
        eprintln!(
            "no locks, semaphores, rate limiters or job groups match `{}`",
            opt.pattern
        );
        return Ok(ExitCode::SUCCESS);
    }
    let width = found
        .iter()
        .map(|row| row.found.name.len())
        .max()
        .unwrap_or(4)
        .max(4);
    let lease_width = 14;
    println!(
        "{:<width$}  {:<16}  {:>7}  {:<lease_width$}  DETAIL",
        "NAME", "KIND", "HOLDERS", "LEASE"
    );
    for row in &found {
        let f = &row.found;
        let lease = match (f.kind.is_lock(), lease(f)) {
            (_, Some(left)) => format!("{} left", human(left)),
            (true, None) if !f.holders.is_empty() => "no expiry".to_owned(),
            _ => "-".to_owned(),
        };
        println!(
            "{:<width$}  {:<16}  {:>7}  {lease:<lease_width$}  {}",
            f.name,
            f.kind.as_str(),
            holders(row).map_or_else(|| "-".to_owned(), |n| n.to_string()),
            detail(row)
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// The last column: who holds a lock (its first holder), a limiter's rate and the permits
/// left, a group's jobs and the node running one.
fn detail(row: &Row) -> String {
    let f = &row.found;
    match (f.kind, &f.rate) {
        (Kind::RateLimiter, Some(config)) => {
            let rate = format!("{} per {}", config.rate, compact(config.interval));
            match (config.rate_type, f.available_permits) {
                (RateType::Overall, Some(left)) => format!("{rate}, {left} left"),
                (RateType::Overall, None) => rate,
                (RateType::PerClient, _) => format!("{rate} per client"),
            }
        }
        (Kind::JobGroup, _) => {
            let jobs = format!(
                "{} job{}",
                row.jobs.len(),
                if row.jobs.len() == 1 { "" } else { "s" }
            );
            let mut running = row.jobs.iter().filter(|job| job.running.is_some());
            match (running.next(), &row.first) {
                (Some(job), Some((_, client))) => {
                    let more = running.count();
                    let more = if more > 0 {
                        format!(" (and {more} more)")
                    } else {
                        String::new()
                    };
                    format!(
                        "{jobs}; {} running on {}{more}",
                        job.name,
                        short(client.as_ref())
                    )
                }
                _ => format!("{jobs}, none running"),
            }
        }
        _ => match &row.first {
            Some((_, client)) => short(client.as_ref()),
            None => "-".to_owned(),
        },
    }
}

/// Lock owners; a semaphore's permits taken (`None` when its total is not recorded) or leased;
/// the permits an overall rate limiter's window has given out; a job group's runs going on.
fn holders(row: &Row) -> Option<u64> {
    let f = &row.found;
    match f.kind {
        Kind::Semaphore => match (f.total_permits, f.available_permits) {
            (Some(total), Some(available)) => Some((total as i64 - available).max(0) as u64),
            _ => None,
        },
        Kind::PermitSemaphore => Some(f.leased_permits.len() as u64),
        Kind::RateLimiter => match (&f.rate, f.available_permits) {
            (Some(config), Some(available)) => {
                Some((config.rate as i64).saturating_sub(available).max(0) as u64)
            }
            _ => None,
        },
        Kind::JobGroup => Some(row.jobs.iter().filter(|job| job.running.is_some()).count() as u64),
        _ => Some(f.holders.len() as u64),
    }
}

/// The lock's lease, or the longest permit lease.
fn lease(f: &Inspection) -> Option<std::time::Duration> {
    match f.kind {
        Kind::PermitSemaphore => f.leased_permits.iter().map(|p| p.remaining_lease).max(),
        _ => f.remaining_lease,
    }
}

/// A lock's first holder (by owner id), or the node of a job group's first running job, and
/// what its client registered; `None` for a free lock, a group with nothing running, and
/// semaphores and limiters.
async fn first_holder(
    client: &Client,
    f: &Inspection,
    jobs: &[JobInfo],
) -> Option<(String, Option<ClientInfo>)> {
    let owner = match f.kind {
        Kind::JobGroup => jobs
            .iter()
            .find_map(|job| job.running.as_ref())?
            .owner
            .clone(),
        _ => f.holders.first()?.owner.clone(),
    };
    let info = client.client_info(&owner).await.ok().flatten();
    Some((owner, info))
}

/// A holder in a few words: its client's name (else program) at host and pid.
fn short(client: Option<&ClientInfo>) -> String {
    match client {
        Some(c) => format!(
            "{} on {} (pid {})",
            c.name.as_deref().unwrap_or(&c.program),
            c.host,
            c.pid
        ),
        None => "unknown (Java client?)".to_owned(),
    }
}

fn to_json(row: &Row) -> serde_json::Value {
    let f = &row.found;
    let mut out = json!({
        "name": f.name,
        "kind": f.kind.as_str(),
        "holders": holders(row),
        "remaining_lease_ms": lease(f).map(|d| d.as_millis() as u64),
        "available_permits": f.available_permits,
        "holder": row.first.as_ref().map(|(owner, client)| json!({
            "owner": owner,
            "client": crate::status::client_json(client.as_ref()),
        })),
    });
    if let Some(config) = &f.rate {
        let limiter = crate::limit::to_json(&f.name, config, f.available_permits);
        for field in ["rate", "interval_ms", "rate_type", "keep_alive_ms"] {
            out[field] = limiter[field].clone();
        }
    }
    if f.kind == Kind::JobGroup {
        out["jobs"] = json!(row.jobs.len());
        out["running"] = row
            .jobs
            .iter()
            .filter_map(|job| Some(json!({"job": job.name, "owner": job.running.as_ref()?.owner})))
            .collect();
    }
    out
}
