//! `latchkey status`: one snapshot of a lock.

use std::process::ExitCode;

use anyhow::{Context, Result};
use latchkey::LockStatus;
use serde_json::json;

use crate::connect::{self, Target};
use crate::duration::human;
use crate::opt::StatusOpt;

/// Prints a lock's holders, hold counts, remaining lease, fencing token and waiting clients.
pub async fn run(opt: StatusOpt) -> Result<ExitCode> {
    let target = Target::given_or_default(&opt.connect);
    let client = connect::client(&target.url, None).await?;
    let context = || format!("reading the lock `{}`", opt.lock);
    let status = client
        .lock(opt.lock.clone())
        .status()
        .await
        .with_context(context)?;
    let fair_queue = client
        .fair_lock(opt.lock.clone())
        .queue()
        .await
        .with_context(context)?;
    if opt.json {
        println!("{}", to_json(&opt.lock, &status, &fair_queue));
    } else {
        print!("{}", to_text(&opt.lock, &status, &fair_queue));
    }
    Ok(ExitCode::SUCCESS)
}

/// The JSON form (one object; durations in milliseconds, `null` when absent). `fair_queue`
/// lists the owners waiting in line for it as a fair lock.
pub fn to_json(name: &str, status: &LockStatus, fair_queue: &[String]) -> serde_json::Value {
    json!({
        "lock": name,
        "locked": !status.holders.is_empty(),
        "holders": status.holders.iter().map(|h| json!({
            "owner": h.owner,
            "holds": h.holds,
        })).collect::<Vec<_>>(),
        "remaining_lease_ms": status.remaining_lease.map(|d| d.as_millis() as u64),
        "fencing_token": status.fencing_token,
        "waiting_clients": status.waiting_clients,
        "fair_queue": fair_queue,
    })
}

/// The human form.
pub fn to_text(name: &str, status: &LockStatus, fair_queue: &[String]) -> String {
    let mut out = format!("lock      {name}\n");
    if status.holders.is_empty() {
        out.push_str("state     free\n");
    } else {
        out.push_str(&format!(
            "state     held by {} owner{}\n",
            status.holders.len(),
            if status.holders.len() == 1 { "" } else { "s" }
        ));
        for holder in &status.holders {
            out.push_str(&format!(
                "holder    {}  ({} hold{})\n",
                holder.owner,
                holder.holds,
                if holder.holds == 1 { "" } else { "s" }
            ));
        }
        match status.remaining_lease {
            Some(left) => out.push_str(&format!("lease     {} left\n", human(left))),
            None => out.push_str("lease     no expiry\n"),
        }
    }
    match status.fencing_token {
        Some(token) => out.push_str(&format!(
            "token     {token} (the latest holder's fencing token)\n"
        )),
        None => out.push_str("token     none (never taken by latchkey)\n"),
    }
    out.push_str(&format!("waiting   {} client(s)\n", status.waiting_clients));
    if !fair_queue.is_empty() {
        out.push_str(&format!(
            "in line   {} (fair lock queue, first in line first)\n",
            fair_queue.join(", ")
        ));
    }
    out
}
