//! `latchkey list`: the locks and semaphores that exist.

use std::process::ExitCode;

use anyhow::{Context, Result};
use latchkey_redis::{Client, ClientInfo, Inspection, Kind};
use serde_json::json;

use crate::connect::{self, Target};
use crate::duration::human;
use crate::opt::ListOpt;

/// Lists the locks and semaphores whose names match the pattern, with kind, holder count and
/// lease. Names are found with SCAN (on every primary of a cluster) and read one at a time;
/// keys of other kinds are left out.
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
                let first = first_holder(&client, &inspection).await;
                found.push((inspection, first));
            }
            // Gone since the scan, or not a lock or semaphore.
            Ok(None) => {}
            Err(error) if error.is_wrong_type() || error.is_invalid_argument() => {}
            Err(error) => return Err(error).with_context(|| format!("reading `{name}`")),
        }
    }
    if opt.json {
        let rows: Vec<_> = found.iter().map(|(f, first)| to_json(f, first)).collect();
        println!("{}", serde_json::Value::Array(rows));
        return Ok(ExitCode::SUCCESS);
    }
    if found.is_empty() {
        eprintln!("no locks or semaphores match `{}`", opt.pattern);
        return Ok(ExitCode::SUCCESS);
    }
    let width = found
        .iter()
        .map(|(f, _)| f.name.len())
        .max()
        .unwrap_or(4)
        .max(4);
    let lease_width = 14;
    println!(
        "{:<width$}  {:<16}  {:>7}  {:<lease_width$}  HOLDER",
        "NAME", "KIND", "HOLDERS", "LEASE"
    );
    for (f, first) in &found {
        let lease = match (f.kind.is_lock(), lease(f)) {
            (_, Some(left)) => format!("{} left", human(left)),
            (true, None) if !f.holders.is_empty() => "no expiry".to_owned(),
            _ => "-".to_owned(),
        };
        let holder = match first {
            Some((_, client)) => short(client.as_ref()),
            None => "-".to_owned(),
        };
        println!(
            "{:<width$}  {:<16}  {:>7}  {lease:<lease_width$}  {holder}",
            f.name,
            f.kind.as_str(),
            holders(f).map_or_else(|| "-".to_owned(), |n| n.to_string())
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// Lock owners; a semaphore's permits taken (`None` when its total is not recorded) or leased.
fn holders(f: &Inspection) -> Option<u64> {
    match f.kind {
        Kind::Semaphore => match (f.total_permits, f.available_permits) {
            (Some(total), Some(available)) => Some((total as i64 - available).max(0) as u64),
            _ => None,
        },
        Kind::PermitSemaphore => Some(f.leased_permits.len() as u64),
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

/// A lock's first holder (by owner id) and what its client registered; `None` for a free
/// lock and for semaphores.
async fn first_holder(client: &Client, f: &Inspection) -> Option<(String, Option<ClientInfo>)> {
    let owner = f.holders.first()?.owner.clone();
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

fn to_json(f: &Inspection, first: &Option<(String, Option<ClientInfo>)>) -> serde_json::Value {
    json!({
        "name": f.name,
        "kind": f.kind.as_str(),
        "holders": holders(f),
        "remaining_lease_ms": lease(f).map(|d| d.as_millis() as u64),
        "available_permits": f.available_permits,
        "holder": first.as_ref().map(|(owner, client)| json!({
            "owner": owner,
            "client": crate::status::client_json(client.as_ref()),
        })),
    })
}
