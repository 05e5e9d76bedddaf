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

/// `limiter`: every library at both rates, in order; a window never logs more grants than its
/// rate; the GCRA keys are measured; the redisson crate's limiter is reported as never
/// refilling.
#[tokio::test]
async fn bench_limiter_json_has_every_row() {
    let server = RedisServer::spawn();
    let out = output(bench(
        Some(&server),
        &["limiter", "--json", "--duration", "300ms", "--tasks", "8"],
    ))
    .await;
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON on stdout");
    let limiter = &json["limiter"];
    assert_eq!(limiter["tasks"], 8);
    let runs = limiter["runs"].as_array().expect("limiter runs");
    let rows: Vec<(u64, &str, &str)> = runs
        .iter()
        .map(|r| {
            (
                r["rate"].as_u64().unwrap(),
                r["library"].as_str().unwrap(),
                r["limiter"].as_str().unwrap(),
            )
        })
        .collect();
    let mut expected = Vec::new();
    for rate in [10, 10_000] {
        expected.extend([
            (rate, "latchkey", "window"),
            (rate, "latchkey", "gcra"),
            (rate, "redisson", "token bucket"),
            (rate, "Redisson script", "window"),
        ]);
    }
    assert_eq!(rows, expected);
    for run in runs {
        assert!(run["decisions"].as_u64().unwrap() > 0, "{run}");
        assert!(run["per_second"].as_f64().unwrap() > 0.0, "{run}");
        assert!(
            run["commands_per_decision"].as_f64().unwrap() > 0.0,
            "{run}"
        );
        assert!(run["redis_cpu_us_per_op"].as_f64().is_some(), "{run}");
        if run["limiter"] == "window" {
            let roles: Vec<&str> = run["keys"]
                .as_array()
                .unwrap()
                .iter()
                .map(|k| k["role"].as_str().unwrap())
                .collect();
            assert_eq!(roles, ["config", "value", "permits"], "{run}");
            let logged = run["log_members"].as_u64().unwrap();
            assert!(logged >= 1, "a window that admitted logs its grants: {run}");
            assert!(
                logged <= run["rate"].as_u64().unwrap(),
                "a window logs at most its rate: {run}"
            );
        }
    }
    let gcra = &limiter["gcra_memory"];
    assert_eq!(gcra["keys"], 10_000);
    assert!(gcra["memory_usage_one_key"].as_u64().unwrap() > 0, "{gcra}");
    assert_eq!(limiter["redisson_refilled"], false, "{limiter}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(!text.contains("targets: all 0"), "{text}");
}

/// The table form of `limiter` names every row and the redisson crate's refill.
#[tokio::test]
async fn bench_limiter_table_names_the_rows() {
    let server = RedisServer::spawn();
    let out = output(bench(
        Some(&server),
        &["limiter", "--duration", "200ms", "--tasks", "4"],
    ))
    .await;
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    for row in [
        "window",
        "gcra",
        "token bucket",
        "Redisson script",
        "10,000",
    ] {
        assert!(text.contains(row), "{row} missing:\n{text}");
    }
    assert!(text.contains("GCRA memory per limited key"), "{text}");
    assert!(text.contains("was never written"), "{text}");
    assert!(text.contains("targets: none in these workloads"), "{text}");
}

/// `scheduler`: 20 jobs every 2 s on 3 nodes for 2 occurrences: each occurrence runs
/// exactly once, and both idle groups are watched.
#[tokio::test]
async fn bench_scheduler_runs_each_occurrence_once() {
    let server = RedisServer::spawn();
    let out = output(bench(
        Some(&server),
        &[
            "scheduler",
            "--json",
            "--duration",
            "200ms",
            "--scheduler-jobs",
            "20",
            "--scheduler-every",
            "2s",
            "--scheduler-occurrences",
            "2",
            "--scheduler-idle",
            "1s",
        ],
    ))
    .await;
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON on stdout");
    let s = &json["scheduler"];
    assert_eq!(s["nodes"], 3);
    assert_eq!(s["jobs"], 20);
    assert_eq!(s["expected"], 40);
    assert_eq!(s["ran"], 40, "{s}");
    assert_eq!(s["missing"], 0, "{s}");
    assert_eq!(s["duplicates"], 0, "{s}");
    assert_eq!(s["per_node"].as_array().unwrap().len(), 3);
    assert!(s["calls_per_occurrence"].as_f64().unwrap() > 0.0, "{s}");
    let idle: Vec<u64> = s["idle"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["jobs"].as_u64().unwrap())
        .collect();
    assert_eq!(idle, [100, 20]);
    assert_eq!(json["correct"], true);
}

/// `--scheduler-every` under a second is refused when the command line is read.
#[tokio::test]
async fn a_scheduler_interval_under_a_second_is_a_usage_error() {
    let out = output(bench(None, &["scheduler", "--scheduler-every", "500ms"])).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(64), "{stderr}");
    assert!(stderr.contains("--scheduler-every"), "{stderr}");
}
