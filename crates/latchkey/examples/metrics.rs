//! Serves latchkey's metrics for Prometheus while a few workers contend for a lock.
//!
//! ```sh
//! REDIS_URL=redis://127.0.0.1:6379 PORT=9000 cargo run -p latchkey-redis --example metrics
//! curl -s http://127.0.0.1:9000/metrics | grep latchkey_
//! ```
//!
//! latchkey only records (through the `metrics` facade); this program picks the exporter.
//! Every metric is described in docs/metrics.md.

use std::time::Duration;

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned());
    let port: u16 = match std::env::var("PORT") {
        Ok(port) => port.parse()?,
        Err(_) => 9000,
    };

    // The exporter answers GET /metrics on its own listener. Latency metrics end in
    // `_seconds`: give them buckets so they render as Prometheus histograms (the exporter's
    // default is a summary).
    PrometheusBuilder::new()
        .with_http_listener(([127, 0, 0, 1], port))
        .set_buckets_for_metric(
            Matcher::Suffix("_seconds".to_owned()),
            &[0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0],
        )?
        .install()?;
    println!("metrics on http://127.0.0.1:{port}/metrics");

    // One lock name, so it is safe to label the metrics with it.
    let client = latchkey_redis::Client::builder(url)
        .metrics_name_label(true)
        .connect()
        .await?;

    // Four workers take turns on the lock: most acquires wait (contended), some give up
    // (timeouts), all show up in latchkey_acquires_total and the latency histograms.
    let mut workers = Vec::new();
    for worker in 0..4u64 {
        let lock = client.lock("example:metrics");
        workers.push(tokio::spawn(async move {
            loop {
                match lock.try_lock(Duration::from_millis(150)).await {
                    Ok(Some(guard)) => {
                        // The critical section: hold it a little while.
                        tokio::time::sleep(Duration::from_millis(20 + 10 * worker)).await;
                        if let Err(err) = guard.unlock().await {
                            eprintln!("worker {worker}: unlock failed: {err}");
                        }
                    }
                    Ok(None) => {} // counted as outcome="timeout"
                    Err(err) => {
                        eprintln!("worker {worker}: {err}");
                        tokio::time::sleep(Duration::from_secs(1)).await;
                    }
                }
            }
        }));
    }

    // Run until Ctrl-C.
    tokio::signal::ctrl_c().await?;
    for worker in workers {
        worker.abort();
    }
    Ok(())
}
