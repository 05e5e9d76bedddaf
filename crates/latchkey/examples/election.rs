//! A cron-style job that runs on exactly one node of a fleet.
//!
//! Start it on as many machines (or terminals) as you like: one of them leads and runs the job
//! every few seconds; the others stand by. Stop the leader with Ctrl-C and a standby takes over
//! at once; kill it with `kill -9` and a standby takes over within the lease (30 s by default).
//! Every run carries the leader's term: give it to whatever the job writes to, so a leader that
//! was paused past its lease cannot overwrite a newer leader's work.
//!
//! ```text
//! REDIS_URL=redis://127.0.0.1:6379 NODE=a cargo run -p latchkey-redis --example election
//! REDIS_URL=redis://127.0.0.1:6379 NODE=b cargo run -p latchkey-redis --example election
//! ```

use std::time::Duration;

use latchkey_redis::{Client, Leadership};

/// How often the leader runs the job.
const EVERY: Duration = Duration::from_secs(5);

#[tokio::main]
async fn main() -> latchkey_redis::Result<()> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned());
    let node = std::env::var("NODE").unwrap_or_else(|_| format!("pid-{}", std::process::id()));
    let client = Client::connect(url).await?;
    let election = client.election("cleanup-job");
    loop {
        if let Some(leader) = election.leader().await? {
            println!(
                "{node}: standing by; {} leads (term {})",
                leader.value, leader.term
            );
        }
        let leadership = tokio::select! {
            led = election.campaign(node.as_str()) => led?,
            _ = tokio::signal::ctrl_c() => return Ok(()),
        };
        println!("{node}: leading in term {}", leadership.term());
        if lead(&node, &leadership).await {
            // Ctrl-C: hand over to the next standby at once, then stop.
            leadership.resign().await?;
            println!("{node}: resigned");
            return Ok(());
        }
        println!("{node}: lost the leadership; standing by again");
    }
}

/// Runs the job every [`EVERY`] while `leadership` lasts. Returns `true` on Ctrl-C, `false`
/// when the leadership was lost.
async fn lead(node: &str, leadership: &Leadership) -> bool {
    let mut tick = tokio::time::interval(EVERY);
    let lost = leadership.lost();
    tokio::pin!(lost);
    loop {
        tokio::select! {
            _ = &mut lost => return false,
            _ = tokio::signal::ctrl_c() => return true,
            _ = tick.tick() => {
                // The job itself: here, a line. A real job passes the term to the storage it
                // writes to (as a fencing token) and checks `leadership.is_lost()` between steps.
                println!("{node}: cleaning up (term {})", leadership.term());
            }
        }
    }
}
