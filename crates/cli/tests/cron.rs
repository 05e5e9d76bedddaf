//! `latchkey cron` and `latchkey jobs` against a real redis-server: three nodes, each
//! occurrence run once, a node killed with SIGKILL while it runs one.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use latchkey_test_support::{eventually, RedisServer};
use tokio::process::{Child, Command};

const BIN: &str = env!("CARGO_BIN_EXE_latchkey");

/// A `latchkey cron` node appending `<token> <due> <attempt> <node>` to `log` for every
/// occurrence it runs, after `work` seconds of work.
fn node(server: &RedisServer, group: &str, n: usize, log: &Path, work: &str) -> Child {
    let script = format!(
        "sleep {work}; echo \"$LATCHKEY_FENCING_TOKEN $LATCHKEY_DUE_TIME $LATCHKEY_ATTEMPT {n} \
         $LATCHKEY_JOB\" >> {}",
        log.display()
    );
    Command::new(BIN)
        .env("REDIS_URL", server.url())
        .args([
            "cron",
            "--group",
            group,
            "--every",
            "1s",
            "--watchdog",
            "1s",
            "--grace",
            "1s",
            "report",
            "--",
            "sh",
            "-c",
            &script,
        ])
        .stdout(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("start latchkey cron")
}

/// The lines of `log`: (token, due, attempt, node).
fn runs(log: &Path) -> Vec<(u64, String, u32, usize)> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(|line| {
            let w: Vec<&str> = line.split_whitespace().collect();
            assert_eq!(w.len(), 5, "{line}");
            assert_eq!(w[4], "report");
            (
                w[0].parse().unwrap(),
                w[1].to_owned(),
                w[2].parse().unwrap(),
                w[3].parse().unwrap(),
            )
        })
        .collect()
}

async fn stop(mut child: Child) -> Option<i32> {
    let pid = child.id().expect("running") as i32;
    unsafe_kill(pid, libc::SIGTERM);
    let status = tokio::time::timeout(Duration::from_secs(10), child.wait())
        .await
        .expect("stops within the grace")
        .unwrap();
    status.code()
}

fn unsafe_kill(pid: i32, signal: i32) {
    // SAFETY: kill(2) on a child of this process.
    let _ = unsafe { libc::kill(pid, signal) };
}

/// Three nodes, `--every 1s`: each occurrence ran once, with the token one more than the last;
/// the due times are RFC 3339 in UTC, one second apart. SIGTERM stops a node with 128 + 15.
/// `latchkey jobs` shows the job, its last run and the node that ran it.
#[tokio::test]
async fn three_nodes_run_each_occurrence_once() {
    let server = RedisServer::spawn();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("runs");
    let nodes: Vec<Child> = (0..3)
        .map(|n| node(&server, "fleet", n, &log, "0.1"))
        .collect();
    assert!(
        eventually(Duration::from_secs(30), || async { runs(&log).len() >= 8 }).await,
        "eight occurrences ran: {:?}",
        runs(&log)
    );
    for node in nodes {
        assert_eq!(stop(node).await, Some(128 + libc::SIGTERM));
    }
    let runs = runs(&log);
    let mut by_due: BTreeMap<String, Vec<&(u64, String, u32, usize)>> = BTreeMap::new();
    for run in &runs {
        by_due.entry(run.1.clone()).or_default().push(run);
    }
    assert!(
        by_due.values().all(|r| r.len() == 1),
        "an occurrence ran twice: {runs:?}"
    );
    let tokens: Vec<u64> = by_due.values().map(|r| r[0].0).collect();
    assert!(tokens.windows(2).all(|w| w[1] == w[0] + 1), "{tokens:?}");
    for due in by_due.keys() {
        assert!(
            due.ends_with(".000Z") && due.len() == 24,
            "RFC 3339 UTC: {due}"
        );
    }

    let out = Command::new(BIN)
        .env("REDIS_URL", server.url())
        .args(["jobs", "fleet", "--json"])
        .output()
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let jobs: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(jobs[0]["job"], "report");
    assert_eq!(jobs[0]["schedule"], "every 1000 ms");
    assert_eq!(jobs[0]["last"]["outcome"], "ok");
    assert!(jobs[0]["last"]["client"]["program"]
        .as_str()
        .unwrap()
        .starts_with("latchkey"));
    let out = Command::new(BIN)
        .env("REDIS_URL", server.url())
        .args(["jobs", "fleet"])
        .output()
        .await
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("job       report\nschedule  every 1000 ms\n"),
        "{text}"
    );
    assert!(text.contains("last      due "), "{text}");
}

/// A node killed with SIGKILL while its command runs an occurrence: another node runs the
/// same occurrence again once the claim's lease (--watchdog 1s) has run out, attempt 2, with a
/// higher token.
#[tokio::test]
async fn a_killed_nodes_occurrence_runs_again_on_another_node() {
    let server = RedisServer::spawn();
    let dir = tempfile::tempdir().unwrap();
    let (started, log) = (dir.path().join("started"), dir.path().join("runs"));
    // Node 0 notes that it started, then works for a minute.
    let script = format!(
        "echo \"$LATCHKEY_FENCING_TOKEN $LATCHKEY_DUE_TIME\" >> {}; sleep 60",
        started.display()
    );
    let mut first = Command::new(BIN)
        .env("REDIS_URL", server.url())
        .args([
            "cron",
            "--group",
            "kill",
            "--every",
            "2s",
            "--watchdog",
            "1s",
            "report",
            "--",
            "sh",
            "-c",
            &script,
        ])
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    assert!(
        eventually(Duration::from_secs(10), || async { started.exists() }).await,
        "node 0 ran an occurrence"
    );
    let line = std::fs::read_to_string(&started).unwrap();
    let (token, due) = line.trim().split_once(' ').unwrap();
    let token: u64 = token.parse().unwrap();
    unsafe_kill(first.id().unwrap() as i32, libc::SIGKILL);
    let _ = first.wait().await;
    let second = node(&server, "kill", 1, &log, "0");
    assert!(
        eventually(Duration::from_secs(10), || async {
            runs(&log).iter().any(|r| r.1 == due)
        })
        .await,
        "node 1 ran the occurrence {due} again: {:?}",
        runs(&log)
    );
    let again = runs(&log).into_iter().find(|r| r.1 == due).unwrap();
    assert_eq!(again.2, 2, "attempt 2");
    assert!(again.0 > token, "a higher token: {again:?} after {token}");
    stop(second).await;
}
