//! `latchkey-bench` against real redis-servers.

use std::process::Output;

use latchkey_test_support::RedisServer;
use tokio::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_latchkey-bench");

/// `latchkey-bench <args>`, with REDIS_URL set to `server` or removed.
fn bench(server: Option<&RedisServer>, args: &[&str]) -> Command {
    let mut command = Command::new(BIN);
    match server {
        Some(server) => command.env("REDIS_URL", server.url()),
        None => command.env_remove("REDIS_URL"),
    };
    command.args(args).kill_on_drop(true);
    command
}

async fn output(mut command: Command) -> Output {
    let out = command.output().await.expect("run latchkey-bench");
    eprintln!(
        "--- latchkey-bench exited {:?}\n--- stdout:\n{}--- stderr:\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// The `fair` workload: 8 clients on one fair lock, the counter exact, every client served.
#[tokio::test]
async fn bench_fair_json_counts_every_section() {
    let server = RedisServer::spawn();
    let out = output(bench(
        Some(&server),
        &["fair", "--json", "--duration", "300ms"],
    ))
    .await;
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON on stdout");
    let fair = json["fair"].as_array().expect("fair runs");
    assert_eq!(fair.len(), 1, "latchkey only: rslock has no fair lock");
    let run = &fair[0];
    assert_eq!(run["library"], "latchkey");
    assert_eq!(run["counter"]["ok"], true, "{run}");
    let per_client = run["per_task"].as_array().unwrap();
    assert_eq!(per_client.len(), 8);
    assert!(
        per_client.iter().all(|n| n.as_u64().unwrap() > 0),
        "FIFO serves every client: {per_client:?}"
    );
    assert!(json["checks"]
        .as_array()
        .unwrap()
        .iter()
        .any(|c| c["workload"] == "fair"));
}

#[tokio::test]
async fn bench_solo_json_parses() {
    let server = RedisServer::spawn();
    let out = output(bench(
        Some(&server),
        &["solo", "--json", "--duration", "300ms"],
    ))
    .await;
    assert_eq!(out.status.code(), Some(0));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON on stdout");
    let solo = json["solo"].as_array().expect("solo runs");
    let variants: Vec<(&str, &str)> = solo
        .iter()
        .map(|r| {
            (
                r["library"].as_str().unwrap(),
                r["variant"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        variants,
        [
            ("latchkey", "unlock"),
            ("latchkey", "drop"),
            ("rslock", ""),
            ("redisson", "")
        ]
    );
    for run in solo {
        assert!(run["count"].as_u64().unwrap() > 0, "{run}");
        assert!(run["per_second"].as_f64().unwrap() > 0.0, "{run}");
    }
    assert!(json["ceiling"]["sequential_per_s"].as_f64().unwrap() > 0.0);
    assert_eq!(json["correct"], true);
    assert!(json["checks"]
        .as_array()
        .unwrap()
        .iter()
        .any(|c| c["workload"] == "solo"));
}

/// `contended` with both peers: every library's counter is exact, redisson's PINGs (one per
/// pool checkout) count with its commands, and the workloads redisson cannot run are named.
#[tokio::test]
async fn bench_contended_json_measures_both_peers() {
    let server = RedisServer::spawn();
    let out = output(bench(
        Some(&server),
        &["contended", "fair", "--json", "--duration", "300ms"],
    ))
    .await;
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON on stdout");
    let runs = json["contended"].as_array().expect("contended runs");
    let libraries: Vec<&str> = runs
        .iter()
        .map(|r| r["library"].as_str().unwrap())
        .collect();
    assert_eq!(libraries, ["latchkey", "rslock", "redisson"]);
    for run in runs {
        assert_eq!(run["counter"]["ok"], true, "{run}");
        assert!(run["count"].as_u64().unwrap() > 0, "{run}");
    }
    let redisson = &runs[2]["commands"];
    assert_eq!(redisson["health_checks"], 0, "{redisson}");
    assert!(
        redisson["client_sent"]["ping"].as_u64().unwrap() > 0,
        "{redisson}"
    );
    let notes = json["peer_notes"].as_array().expect("peer notes");
    assert!(
        notes
            .iter()
            .any(|n| n["library"] == "redisson" && n["workload"] == "fair"),
        "{notes:?}"
    );
    assert_eq!(json["fair"].as_array().unwrap().len(), 1);
}

/// `--duration` is checked when the command line is read: zero is a usage error (exit 64)
/// naming the flag, before anything connects.
#[tokio::test]
async fn a_zero_duration_is_a_usage_error() {
    let out = output(bench(None, &["solo", "--duration", "0"])).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(64), "{stderr}");
    assert!(stderr.contains("--duration"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}
