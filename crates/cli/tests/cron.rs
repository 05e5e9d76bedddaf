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

/// Three nodes, `--every 1s`: each occurrence ran once, with tokens increasing;
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
    assert!(tokens.windows(2).all(|w| w[1] > w[0]), "{tokens:?}");
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

/// Where Debian's `libfaketime` package (installed by .ci/servers) puts the library.
const LIBFAKETIME: [&str; 3] = [
    "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1",
    "/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1",
    "/usr/lib/faketime/libfaketime.so.1",
];

fn libfaketime() -> &'static Path {
    LIBFAKETIME
        .iter()
        .map(Path::new)
        .find(|p| p.exists())
        .unwrap_or_else(|| {
            panic!(
                "libfaketime is not installed (none of {LIBFAKETIME:?}): .ci/servers installs \
                 it (apt-get install faketime)"
            )
        })
}

/// A `latchkey cron` node of group `skew` whose clock is off by `skew` (libfaketime's
/// `FAKETIME`, e.g. `+5s`; its commands inherit it) or not; every occurrence it runs appends
/// `<due> <token> <node> <its clock, ms> <this machine's clock, ms>` to `log`.
fn skewed_node(server: &RedisServer, n: usize, skew: Option<&str>, log: &Path) -> Child {
    let script = format!(
        "echo \"$LATCHKEY_DUE_TIME $LATCHKEY_FENCING_TOKEN {n} $(date +%s%3N) \
         $(env -u LD_PRELOAD date +%s%3N)\" >> {}",
        log.display()
    );
    let mut command = Command::new(BIN);
    if let Some(skew) = skew {
        command
            .env("LD_PRELOAD", libfaketime())
            .env("FAKETIME", skew);
    }
    command
        .env("REDIS_URL", server.url())
        .args([
            "cron",
            "--group",
            "skew",
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

/// One line of a [`skewed_node`]'s log.
#[derive(Debug)]
struct SkewedRun {
    due_ms: i64,
    token: u64,
    node: usize,
    node_clock_ms: i64,
    clock_ms: i64,
}

fn skewed_runs(log: &Path) -> Vec<SkewedRun> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(|line| {
            let w: Vec<&str> = line.split_whitespace().collect();
            assert_eq!(w.len(), 5, "{line}");
            SkewedRun {
                due_ms: chrono::DateTime::parse_from_rfc3339(w[0])
                    .unwrap_or_else(|e| panic!("{line}: {e}"))
                    .timestamp_millis(),
                token: w[1].parse().unwrap(),
                node: w[2].parse().unwrap(),
                node_clock_ms: w[3].parse().unwrap(),
                clock_ms: w[4].parse().unwrap(),
            }
        })
        .collect()
}

/// Node clocks skewed by +5 s and -5 s (two of three nodes under libfaketime; redis-server,
/// on this machine's clock, is not) change nothing: the scheduler reads only the server's
/// clock and monotonic time. Each occurrence ran once, the due times are consecutive seconds,
/// the tokens increase (and no claim went without its run), and every occurrence ran within
/// a second of its due time by the server's clock, on whichever node.
#[tokio::test]
async fn node_clocks_skewed_by_5_s_change_nothing() {
    // libfaketime takes effect here: a process under it reads a clock 5 s ahead.
    let probe = std::process::Command::new("sh")
        .args(["-c", "date +%s%3N; env -u LD_PRELOAD date +%s%3N"])
        .env("LD_PRELOAD", libfaketime())
        .env("FAKETIME", "+5s")
        .output()
        .expect("run date under libfaketime");
    let clocks: Vec<i64> = String::from_utf8_lossy(&probe.stdout)
        .lines()
        .map(|l| l.trim().parse().expect("date +%s%3N"))
        .collect();
    assert!(
        clocks.len() == 2 && (4000..6000).contains(&(clocks[0] - clocks[1])),
        "libfaketime did not skew the clock: {clocks:?}"
    );

    let server = RedisServer::spawn();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("runs");
    let skews = [None, Some("+5s"), Some("-5s")];
    let nodes: Vec<Child> = skews
        .iter()
        .enumerate()
        .map(|(n, skew)| skewed_node(&server, n, *skew, &log))
        .collect();
    // Eight occurrences, and each node ran at least one of them.
    assert!(
        eventually(Duration::from_secs(40), || async {
            let runs = skewed_runs(&log);
            runs.len() >= 8 && (0..skews.len()).all(|n| runs.iter().any(|r| r.node == n))
        })
        .await,
        "eight occurrences ran, on every node: {:?}",
        skewed_runs(&log)
    );
    for node in nodes {
        assert_eq!(stop(node).await, Some(128 + libc::SIGTERM));
    }
    let mut runs = skewed_runs(&log);
    runs.sort_by_key(|r| r.due_ms);
    for run in &runs {
        // The node's commands saw its skewed clock …
        let skew = run.node_clock_ms - run.clock_ms;
        let expected = [0, 5000, -5000][run.node];
        assert!(
            (skew - expected).abs() < 1000,
            "node {} runs {skew} ms off, not {expected} ms: {run:?}",
            run.node
        );
        // … but ran the occurrence when the server's clock said it was due.
        let late = run.clock_ms - run.due_ms;
        assert!(
            (0..1000).contains(&late),
            "occurrence {} ran {late} ms after its due time, on node {}: {runs:?}",
            run.due_ms,
            run.node
        );
    }
    for pair in runs.windows(2) {
        assert_eq!(
            pair[1].due_ms,
            pair[0].due_ms + 1000,
            "each occurrence once, one second apart: {runs:?}"
        );
        assert!(pair[1].token > pair[0].token, "{runs:?}");
    }
    // No claim went without its run: the job's last token is the last one run.
    let mut conn = server.client().get_connection().unwrap();
    let token: u64 = redis::cmd("HGET")
        .arg("latchkey_job:{skew}:report")
        .arg("token")
        .query(&mut conn)
        .unwrap();
    assert_eq!(Some(token), runs.iter().map(|r| r.token).max(), "{runs:?}");
}
