//! `latchkey queue offer|take|stats`: the delayed queue and its ready list, items as JSON.

use std::io::Write;
use std::process::ExitCode;

use anyhow::{anyhow, Context, Result};
use serde_json::{json, Value};

use crate::connect::{self, Target};
use crate::exit::{self, coded};
use crate::opt::{QueueCommand, QueueOfferOpt, QueueStatsOpt, QueueTakeOpt};

/// Runs one queue subcommand.
pub async fn run(command: QueueCommand) -> Result<ExitCode> {
    match command {
        QueueCommand::Offer(opt) => offer(opt).await,
        QueueCommand::Take(opt) => take(opt).await,
        QueueCommand::Stats(opt) => stats(opt).await,
    }
}

async fn offer(opt: QueueOfferOpt) -> Result<ExitCode> {
    let item: Value = if opt.text {
        Value::String(opt.item.clone())
    } else {
        serde_json::from_str(&opt.item).map_err(|e| {
            coded(
                2,
                anyhow!(
                    "ITEM is not JSON ({e}); quote strings as JSON (`'\"text\"'`) or add --text"
                ),
            )
        })?
    };
    let target = Target::given_or_default(&opt.connect);
    let client = connect::client(&target.url, None).await?;
    let queue = client.delayed_queue::<Value>(opt.queue.clone());
    let id = queue
        .offer(&item, opt.delay)
        .await
        .with_context(|| format!("offering to the queue `{}`", opt.queue))?;
    println!("{id}");
    Ok(ExitCode::SUCCESS)
}

async fn take(opt: QueueTakeOpt) -> Result<ExitCode> {
    let target = Target::given_or_default(&opt.connect);
    let client = connect::client(&target.url, None).await?;
    let queue = client.blocking_queue::<Value>(opt.queue.clone());
    let context = || format!("taking from the queue `{}`", opt.queue);
    let delivery = match opt.timeout {
        Some(timeout) => queue.poll(timeout).await.with_context(context)?,
        None => Some(queue.take().await.with_context(context)?),
    };
    match delivery {
        Some(delivery) => {
            // Acknowledged once it is out: if latchkey dies before (or stdout is gone), the item
            // stays in the queue and is delivered again after the visibility timeout.
            let mut out = std::io::stdout().lock();
            writeln!(out, "{}", delivery.item())
                .and_then(|()| out.flush())
                .context("printing the item")?;
            let ack = delivery.ack().await.with_context(|| {
                format!(
                    "acknowledging the item taken from the queue `{}` (it is delivered again \
                     after the visibility timeout)",
                    opt.queue
                )
            })?;
            if !ack.is_acked() {
                eprintln!(
                    "latchkey: this item of `{}` was delivered to another consumer too (its \
                     visibility timeout ran out) and finished there",
                    opt.queue
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        None => Err(coded(
            exit::BUSY,
            anyhow!(
                "no item became ready in the queue `{}` within --timeout",
                opt.queue
            ),
        )),
    }
}

async fn stats(opt: QueueStatsOpt) -> Result<ExitCode> {
    let target = Target::given_or_default(&opt.connect);
    let client = connect::client(&target.url, None).await?;
    let delayed = client.delayed_queue::<Value>(opt.queue.clone());
    let ready = client.blocking_queue::<Value>(opt.queue.clone());
    let context = || format!("reading the queue `{}`", opt.queue);
    let waiting = delayed.len().await.with_context(context)?;
    let ready_len = ready.len().await.with_context(context)?;
    let in_flight = ready.in_flight().await.with_context(context)?;
    let dead = ready.dead_letter_len().await.with_context(context)?;
    if opt.json {
        println!(
            "{}",
            json!({
                "queue": opt.queue,
                "delayed": waiting,
                "ready": ready_len,
                "in_flight": in_flight,
                "dead_letters": dead,
            })
        );
    } else {
        println!("queue         {}", opt.queue);
        println!("delayed       {waiting} (waiting for their due time)");
        println!("ready         {ready_len}");
        println!("in flight     {in_flight} (taken reliably, not yet acknowledged)");
        println!("dead letters  {dead} (could not be decoded)");
    }
    Ok(ExitCode::SUCCESS)
}
