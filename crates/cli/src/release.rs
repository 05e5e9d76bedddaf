//! `latchkey release --force`: delete a lock whoever holds it.

use std::io::{BufRead, IsTerminal, Write};
use std::process::ExitCode;

use anyhow::{anyhow, bail, Context, Result};

use crate::connect::{self, Target};
use crate::opt::ReleaseOpt;
use crate::status;

/// Shows the lock, asks for confirmation on a terminal (unless `--yes`), and force-releases it.
pub async fn run(opt: ReleaseOpt) -> Result<ExitCode> {
    debug_assert!(opt.force, "clap requires --force");
    let target = Target::given_or_default(&opt.connect);
    let client = connect::client(&target.url, None).await?;
    let lock = client.lock(opt.lock.clone());
    let fair = client.fair_lock(opt.lock.clone());
    let context = || format!("reading the lock `{}`", opt.lock);
    let snapshot = lock.status().await.with_context(context)?;
    let fair_queue = fair.queue().await.with_context(context)?;
    if snapshot.holders.is_empty() {
        println!("the lock `{}` is not held; nothing to release", opt.lock);
        return Ok(ExitCode::SUCCESS);
    }
    if !opt.yes {
        if !std::io::stdin().is_terminal() {
            bail!(
                "refusing to release `{}` without confirmation: stdin is not a terminal; add --yes",
                opt.lock
            );
        }
        eprint!("{}", status::to_text(&opt.lock, &snapshot, &fair_queue));
        eprint!(
            "Release `{}` by force? Its holders lose it while they may still be working. [y/N] ",
            opt.lock
        );
        std::io::stderr().flush().ok();
        let mut answer = String::new();
        std::io::stdin()
            .lock()
            .read_line(&mut answer)
            .context("reading the answer")?;
        if !matches!(answer.trim(), "y" | "Y" | "yes" | "YES" | "Yes") {
            return Err(anyhow!("not released"));
        }
    }
    // A fair lock's release wakes the first in its line; a plain one publishes Redisson's
    // unlock message to every waiter.
    let released = if fair_queue.is_empty() {
        lock.force_unlock().await
    } else {
        fair.force_unlock().await
    };
    let existed = released.with_context(|| format!("releasing the lock `{}`", opt.lock))?;
    let owners: Vec<&str> = snapshot.holders.iter().map(|h| h.owner.as_str()).collect();
    if existed {
        println!(
            "released the lock `{}` (was held by {})",
            opt.lock,
            owners.join(", ")
        );
    } else {
        println!(
            "the lock `{}` was released meanwhile; nothing to do",
            opt.lock
        );
    }
    Ok(ExitCode::SUCCESS)
}
