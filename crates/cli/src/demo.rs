//! `latchkey demo`: the stock-deduction story.
//!
//! Workers on several clients sell units from one Redis counter with a read-modify-write
//! (`GET stock`, then `SET stock n-1` if `n > 0`). Without a lock, workers read the same value
//! and each sells "the last unit": more units are sold than were in stock. With latchkey around
//! the read-modify-write, exactly the stock is sold.

use std::io::IsTerminal;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use latchkey_redis::Client;
use redis::aio::MultiplexedConnection;
use redis::AsyncCommands;

use crate::connect::{self, Target};
use crate::duration::human;
use crate::opt::DemoOpt;
use crate::stats::{thousands, Samples};
use crate::ui::{count_bar, Table};

/// What one phase did.
struct Outcome {
    sold: u64,
    left: i64,
    elapsed: Duration,
    waits: Option<Samples>,
}

impl Outcome {
    /// Units sold that the stock did not have.
    fn oversold(&self, stock: u64) -> i64 {
        self.sold as i64 - (stock as i64 - self.left)
    }
}

/// One client: a latchkey client and a plain connection for the stock counter.
struct Shop {
    client: Client,
    conn: MultiplexedConnection,
}

/// Runs both phases and prints the table.
pub async fn run(opt: DemoOpt, target: &Target) -> Result<ExitCode> {
    let run_id: u32 = rand::random();
    let stock_key = format!("latchkey-demo:{run_id:08x}:stock");
    let lock_name = format!("latchkey-demo:{run_id:08x}:lock");
    let mut shops = Vec::new();
    for _ in 0..opt.clients {
        shops.push(Shop {
            client: connect::client(&target.url, None).await?,
            conn: connect::plain(&target.url).await?,
        });
    }
    let shops = Arc::new(shops);
    println!(
        "latchkey demo: {} workers on {} clients sell {} units of stock kept in one Redis counter \
         ({}).\nEach sale reads the stock (GET) and writes it back one lower (SET) if it is above \
         zero.\n",
        opt.workers,
        opt.clients,
        opt.stock,
        target.describe()
    );

    let mut admin = shops[0].conn.clone();
    let _: () = admin.set(&stock_key, opt.stock).await?;
    let unlocked = phase(&opt, &shops, &stock_key, None, "1/2 without a lock").await?;
    let _: () = admin.set(&stock_key, opt.stock).await?;
    let locked = phase(
        &opt,
        &shops,
        &stock_key,
        Some(&lock_name),
        "2/2 with latchkey",
    )
    .await?;
    let _: () = admin
        .del(&[
            stock_key.clone(),
            lock_name.clone(),
            format!("redisson_lock_token:{{{lock_name}}}"),
        ])
        .await?;

    if std::io::stderr().is_terminal() {
        eprintln!(); // below the progress bars
    }
    let mut table = Table::new(
        &[
            "",
            "sold",
            "stock left",
            "oversold",
            "sales/s",
            "wait p50",
            "wait p99",
            "time",
        ],
        1,
    );
    for (label, outcome) in [("without a lock", &unlocked), ("with latchkey", &locked)] {
        let (p50, p99) = match &outcome.waits {
            Some(waits) => {
                let mut waits = waits.clone();
                (human(waits.percentile(50.0)), human(waits.percentile(99.0)))
            }
            None => ("-".to_owned(), "-".to_owned()),
        };
        table.row(vec![
            label.to_owned(),
            thousands(outcome.sold as f64),
            thousands(outcome.left as f64),
            thousands(outcome.oversold(opt.stock) as f64),
            thousands(outcome.sold as f64 / outcome.elapsed.as_secs_f64().max(1e-6)),
            p50,
            p99,
            human(outcome.elapsed),
        ]);
    }
    print!("{}", table.render());
    println!();
    let over = unlocked.oversold(opt.stock);
    if over > 0 {
        println!(
            "Without a lock, workers read the same stock value and each wrote it back one lower: \
             {} units were sold that were not in stock (lost updates).",
            thousands(over as f64)
        );
    } else {
        println!(
            "Without a lock, this run happened not to oversell: the race needs workers to read \
             the same value; try more --workers or --clients."
        );
    }
    let exact = locked.oversold(opt.stock);
    if exact != 0 || locked.sold != opt.stock {
        bail!(
            "with latchkey {} units were sold from a stock of {} ({} oversold): mutual exclusion \
             failed",
            locked.sold,
            opt.stock,
            exact
        );
    }
    println!(
        "With latchkey around the read-modify-write, exactly {} units were sold: 0 oversold.",
        thousands(opt.stock as f64)
    );
    Ok(ExitCode::SUCCESS)
}

/// Workers sell until they see an empty stock; with `lock`, each sale holds it.
async fn phase(
    opt: &DemoOpt,
    shops: &Arc<Vec<Shop>>,
    stock_key: &str,
    lock: Option<&str>,
    label: &str,
) -> Result<Outcome> {
    let bar = count_bar(opt.stock, label);
    let sold = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut workers = tokio::task::JoinSet::new();
    for w in 0..opt.workers {
        let shop = &shops[(w % opt.clients) as usize];
        let lock = lock.map(|name| shop.client.lock(name));
        let mut conn = shop.conn.clone();
        let key = stock_key.to_owned();
        let sold = sold.clone();
        let bar = bar.clone();
        workers.spawn(async move {
            let mut waits = Samples::new();
            loop {
                let guard = match &lock {
                    Some(lock) => {
                        let asked = Instant::now();
                        let guard = lock.lock().await.context("taking the lock")?;
                        waits.push(asked.elapsed());
                        Some(guard)
                    }
                    None => None,
                };
                let stock: i64 = conn.get(&key).await.context("reading the stock")?;
                let sale = stock > 0;
                if sale {
                    let _: () = conn
                        .set(&key, stock - 1)
                        .await
                        .context("writing the stock")?;
                    sold.fetch_add(1, Ordering::Relaxed);
                    bar.inc(1);
                }
                if let Some(guard) = guard {
                    guard.unlock().await.context("releasing the lock")?;
                }
                if !sale {
                    return anyhow::Ok(waits);
                }
            }
        });
    }
    let mut waits = Samples::new();
    while let Some(done) = workers.join_next().await {
        waits.extend(done.context("a worker panicked")??);
    }
    let elapsed = started.elapsed();
    bar.finish();
    let mut conn = shops[0].conn.clone();
    let left: i64 = conn.get(stock_key).await?;
    Ok(Outcome {
        sold: sold.load(Ordering::Relaxed),
        left,
        elapsed,
        waits: lock.map(|_| waits),
    })
}
