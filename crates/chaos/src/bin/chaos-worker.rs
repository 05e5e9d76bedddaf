//! `chaos-worker '<WorkerConfig as JSON>'`: one worker process of a chaos run.
//!
//! Started by the scenario tests of `latchkey-chaos` (see
//! `latchkey_chaos::harness`); it loops acquire → fenced writes → release on
//! one lock, records every step in its history file and stops by itself.
//! Exit status 0 when it stopped normally, 2 for a bad argument, 1 for a
//! fatal error (printed on stderr).

use latchkey_chaos::worker::{die_with_parent, run, WorkerConfig};

fn main() {
    // Never outlive the test that started us (also when it is killed).
    die_with_parent();
    let mut args = std::env::args().skip(1);
    let (Some(json), None) = (args.next(), args.next()) else {
        eprintln!("usage: chaos-worker '<worker config as JSON>'");
        std::process::exit(2);
    };
    let config: WorkerConfig = match serde_json::from_str(&json) {
        Ok(config) => config,
        Err(e) => {
            eprintln!("chaos-worker: bad configuration: {e}");
            std::process::exit(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("chaos-worker: cannot start the runtime: {e}");
            std::process::exit(1);
        }
    };
    let worker = config.worker;
    match runtime.block_on(run(config)) {
        Ok(summary) => eprintln!(
            "worker {worker}: stopped ({}) after {} attempts, {} acquired, {} lost",
            summary.stopped_because, summary.attempts, summary.acquired, summary.lost
        ),
        Err(e) => {
            eprintln!(
                "worker {worker}: fatal: {}",
                match e.downcast_ref::<latchkey_redis::Error>() {
                    Some(e) => e.chain().to_string(),
                    None => e.to_string(),
                }
            );
            std::process::exit(1);
        }
    }
}
