//! The `latchkey` command against real redis-servers.

use std::path::Path;
use std::process::Output;
use std::time::Duration;

use latchkey_redis::Client;
use latchkey_test_support::RedisServer;
use tokio::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_latchkey");

/// `latchkey <args>`, with REDIS_URL set to `server` (as a user would; the `--redis` flag is
/// used by the demo test) or removed.
fn latchkey(server: Option<&RedisServer>, args: &[&str]) -> Command {
    let mut command = Command::new(BIN);
    match server {
        Some(server) => command.env("REDIS_URL", server.url()),
        None => command.env_remove("REDIS_URL"),
    };
    command.args(args).kill_on_drop(true);
    command
}

async fn output(mut command: Command) -> Output {
    let out = command.output().await.expect("run latchkey");
    eprintln!(
        "--- latchkey exited {:?}\n--- stdout:\n{}--- stderr:\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

async fn client(server: &RedisServer) -> Client {
    Client::connect(server.url()).await.expect("connect")
}

#[tokio::test]
async fn run_exits_with_the_commands_status_and_passes_the_token() {
    let server = RedisServer::spawn();
    let out = output(latchkey(
        Some(&server),
        &[
            "run",
            "job",
            "--",
            "sh",
            "-c",
            "echo \"token=$LATCHKEY_FENCING_TOKEN lock=$LATCHKEY_LOCK\"; exit 7",
        ],
    ))
    .await;
    assert_eq!(out.status.code(), Some(7));
    let first = stdout(&out);
    let (token, lock) = first
        .trim()
        .split_once(' ')
        .unwrap_or_else(|| panic!("two words: {first}"));
    assert_eq!(lock, "lock=job");
    let first: u64 = token
        .strip_prefix("token=")
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| panic!("a token: {token}"));
    assert!(first > 0);

    // The lock was released, and the next holder gets a larger token.
    let out = output(latchkey(
        Some(&server),
        &[
            "run",
            "job",
            "--",
            "sh",
            "-c",
            "echo $LATCHKEY_FENCING_TOKEN",
        ],
    ))
    .await;
    assert_eq!(out.status.code(), Some(0));
    let second: u64 = stdout(&out).trim().parse().expect("a token");
    assert!(second > first, "tokens go up: {first} then {second}");
    let status = client(&server).await.lock("job").status().await.unwrap();
    assert!(status.holders.is_empty());
    assert_eq!(
        status.fencing_token.map(latchkey_redis::FencingToken::get),
        Some(second),
        "the latest holder's token"
    );
}

#[tokio::test]
async fn run_reports_a_missing_command() {
    let server = RedisServer::spawn();
    let out = output(latchkey(
        Some(&server),
        &["run", "job", "--", "no-such-command-here"],
    ))
    .await;
    assert_eq!(out.status.code(), Some(127));
    assert!(!client(&server).await.lock("job").is_locked().await.unwrap());
}

/// Reads `start end` lines (nanoseconds) and checks that no two intervals overlap.
fn assert_no_overlap(log: &Path, expected: usize) {
    let text = std::fs::read_to_string(log).expect("read the log");
    let mut intervals: Vec<(u128, u128)> = text
        .lines()
        .map(|line| {
            let mut parts = line.split_whitespace().map(|p| p.parse::<u128>().unwrap());
            (parts.next().unwrap(), parts.next().unwrap())
        })
        .collect();
    assert_eq!(intervals.len(), expected, "log:\n{text}");
    intervals.sort();
    for pair in intervals.windows(2) {
        assert!(
            pair[0].1 <= pair[1].0,
            "critical sections overlap: {:?} and {:?}\nlog:\n{text}",
            pair[0],
            pair[1]
        );
    }
}

#[tokio::test]
async fn runs_on_one_lock_take_turns() {
    let server = RedisServer::spawn();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    // Each command notes when it starts and ends, with a pause between.
    let script = format!(
        "s=$(date +%s%N); sleep 0.2; e=$(date +%s%N); echo \"$s $e\" >> {}",
        log.display()
    );
    let mut children = Vec::new();
    for _ in 0..4 {
        children.push(
            latchkey(Some(&server), &["run", "turns", "--", "sh", "-c", &script])
                .spawn()
                .unwrap(),
        );
    }
    for mut child in children {
        assert!(child.wait().await.unwrap().success());
    }
    assert_no_overlap(&log, 4);
}

#[tokio::test]
async fn fair_runs_take_turns() {
    let server = RedisServer::spawn();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    let script = format!(
        "s=$(date +%s%N); sleep 0.2; e=$(date +%s%N); echo \"$s $e\" >> {}",
        log.display()
    );
    let mut children = Vec::new();
    for _ in 0..3 {
        children.push(
            latchkey(
                Some(&server),
                &["run", "--fair", "fair-turns", "--", "sh", "-c", &script],
            )
            .spawn()
            .unwrap(),
        );
    }
    for mut child in children {
        assert!(child.wait().await.unwrap().success());
    }
    assert_no_overlap(&log, 3);
}

#[tokio::test]
async fn run_on_a_held_lock_with_wait_zero_is_busy() {
    let server = RedisServer::spawn();
    let client = client(&server).await;
    let guard = client.lock("busy").lock().await.unwrap();
    let out = output(latchkey(
        Some(&server),
        &["run", "--wait", "0", "busy", "--", "true"],
    ))
    .await;
    assert_eq!(out.status.code(), Some(75));
    assert!(String::from_utf8_lossy(&out.stderr).contains("busy"));
    guard.unlock().await.unwrap();

    let out = output(latchkey(
        Some(&server),
        &["run", "--wait", "0", "busy", "--", "true"],
    ))
    .await;
    assert_eq!(out.status.code(), Some(0));
}

#[tokio::test]
async fn run_stops_the_command_when_the_lock_is_lost() {
    let server = RedisServer::spawn();
    let started = std::time::Instant::now();
    let out = output(latchkey(
        Some(&server),
        &[
            "run", "--lease", "500ms", "--grace", "1s", "short", "--", "sleep", "30",
        ],
    ))
    .await;
    assert_eq!(out.status.code(), Some(76));
    assert!(String::from_utf8_lossy(&out.stderr).contains("LOST"));
    assert!(started.elapsed() < Duration::from_secs(20));
}

/// An unreachable Redis: the error line names what failed and why (the library's error leaves
/// its cause to `source()`; the command prints the whole chain), each part once.
#[tokio::test]
async fn an_unreachable_redis_is_reported_with_its_cause() {
    let url = format!("redis://127.0.0.1:{}", latchkey_test_support::free_port());
    for args in [&["status", "job"][..], &["run", "job", "--", "true"][..]] {
        let mut command = latchkey(None, args);
        command.env("REDIS_URL", &url);
        let out = output(command).await;
        let stderr = String::from_utf8_lossy(&out.stderr);
        let expected_code = if args[0] == "run" { 125 } else { 1 };
        assert_eq!(out.status.code(), Some(expected_code), "{args:?}");
        let line = format!("connecting to Redis at {url}: cannot reach redis (connecting): ");
        assert!(stderr.contains(&line), "{args:?}: {stderr}");
        // The cause (connection refused), once.
        assert_eq!(stderr.matches("refused").count(), 1, "{args:?}: {stderr}");
    }
}

#[tokio::test]
async fn status_json_describes_the_lock() {
    let server = RedisServer::spawn();
    let client = client(&server).await;
    let lock = client.lock("inspected");
    let guard = lock.lock().await.unwrap();
    // A re-entry is local: Redis (and so `status`) still sees one owner with one hold.
    let inner = guard.reenter();
    let out = output(latchkey(Some(&server), &["status", "inspected", "--json"])).await;
    assert_eq!(out.status.code(), Some(0));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON on stdout");
    assert_eq!(json["lock"], "inspected");
    assert_eq!(json["locked"], true);
    assert_eq!(json["holders"].as_array().unwrap().len(), 1);
    assert_eq!(json["holders"][0]["owner"], guard.owner_id());
    assert_eq!(json["holders"][0]["holds"], 1);
    assert_eq!(json["fencing_token"], guard.fencing_token().get());
    assert!(json["remaining_lease_ms"].as_u64().unwrap() > 0);
    // Released in Redis by the last guard only.
    inner.unlock().await.unwrap();
    let out = output(latchkey(Some(&server), &["status", "inspected", "--json"])).await;
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON on stdout");
    assert_eq!(json["locked"], true);
    assert_eq!(json["holders"][0]["owner"], guard.owner_id());
    guard.unlock().await.unwrap();

    let out = output(latchkey(Some(&server), &["status", "inspected", "--json"])).await;
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON on stdout");
    assert_eq!(json["locked"], false);
    assert_eq!(json["holders"].as_array().unwrap().len(), 0);
}

/// `status`, `list` and `leader` say who holds a lock: the host, process and name its client
/// registered; a holder that registered nothing (a Redisson client) is "unknown".
#[tokio::test]
async fn status_and_list_show_the_holders_client() {
    let server = RedisServer::spawn();
    let client = Client::builder(server.url())
        .client_name("billing-worker-3")
        .connect()
        .await
        .unwrap();
    let guard = client.lock("billed").lock().await.unwrap();
    let pid = std::process::id();
    let out = output(latchkey(Some(&server), &["status", "billed"])).await;
    let text = stdout(&out);
    assert!(
        text.contains(&format!(
            "holder    {}  (1 hold)\nclient    billing-worker-3 (",
            guard.owner_id()
        )) && text.contains(&format!(", pid {pid} on ")),
        "{text}"
    );
    let out = output(latchkey(Some(&server), &["status", "billed", "--json"])).await;
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let registered = &json["holders"][0]["client"];
    assert_eq!(registered["name"], "billing-worker-3");
    assert_eq!(registered["pid"], pid);
    assert_eq!(registered["id"], client.id());
    assert!(registered["version"]
        .as_str()
        .unwrap()
        .starts_with("latchkey-redis "));
    let out = output(latchkey(Some(&server), &["list"])).await;
    let text = stdout(&out);
    assert!(
        text.lines().any(|l| l.starts_with("billed ")
            && l.ends_with(&format!(
                "billing-worker-3 on {} (pid {pid})",
                registered["host"].as_str().unwrap()
            ))),
        "{text}"
    );
    guard.unlock().await.unwrap();
    // A Redisson holder (owner `<uuid>:<thread id>`, no registration).
    let _: () = redis::cmd("HSET")
        .arg("java-held")
        .arg("6f1c64d4-6a8b-4f8e-9d4e-2c1a9b7e5f00:57")
        .arg(1)
        .query_async(&mut server.conn().await)
        .await
        .unwrap();
    let out = output(latchkey(Some(&server), &["status", "java-held"])).await;
    let text = stdout(&out);
    assert!(text.contains("client    unknown (a Java client"), "{text}");
}

#[tokio::test]
async fn release_force_yes_frees_a_held_lock() {
    let server = RedisServer::spawn();
    let client = client(&server).await;
    let lock = client.lock("stuck");
    let guard = lock.lock().await.unwrap();

    // Without --yes and without a terminal it refuses.
    let mut refused = latchkey(Some(&server), &["release", "stuck", "--force"]);
    refused.stdin(std::process::Stdio::null());
    assert_eq!(output(refused).await.status.code(), Some(1));
    assert!(lock.is_locked().await.unwrap());

    let out = output(latchkey(
        Some(&server),
        &["release", "stuck", "--force", "--yes"],
    ))
    .await;
    assert_eq!(out.status.code(), Some(0));
    assert!(!lock.is_locked().await.unwrap());
    assert!(guard.unlock().await.unwrap_err().is_not_owner());
}

#[tokio::test]
async fn demo_oversells_without_the_lock_and_not_with_it() {
    let server = RedisServer::spawn();
    let url = server.url();
    let out = output(latchkey(None, &["demo", "--redis", &url, "--stock", "300"])).await;
    assert_eq!(out.status.code(), Some(0));
    let text = stdout(&out);
    let row = text
        .lines()
        .find(|l| l.starts_with("with latchkey"))
        .expect("a row for the locked phase");
    let cells: Vec<&str> = row["with latchkey".len()..].split_whitespace().collect();
    assert_eq!(
        &cells[..3],
        ["300", "0", "0"],
        "sold, stock left, oversold: {row}"
    );
    assert!(text.contains("0 oversold"));
}

#[tokio::test]
async fn demo_starts_a_private_server_without_a_url() {
    let out = output(latchkey(None, &["demo", "--stock", "50"])).await;
    assert_eq!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stderr).contains("private redis-server"));
}

/// The benchmarks left the command for the `latchkey-bench` crate: `latchkey bench …` is a
/// usage error that says how to run the same benchmark there.
#[tokio::test]
async fn bench_points_to_the_bench_crate() {
    let out = output(latchkey(None, &["bench", "solo", "--json"])).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(64), "{stderr}");
    assert!(
        stderr.contains("`cargo run --release -p latchkey-bench -- solo --json`"),
        "{stderr}"
    );
    let help = output(latchkey(None, &["--help"])).await;
    assert!(!stdout(&help).contains("bench"), "hidden from --help");
}

#[tokio::test]
async fn queue_offer_take_and_stats() {
    let server = RedisServer::spawn();
    let out = output(latchkey(
        Some(&server),
        &[
            "queue",
            "offer",
            "jobs",
            r#"{"order":1001}"#,
            "--delay",
            "300ms",
        ],
    ))
    .await;
    assert_eq!(out.status.code(), Some(0));
    let out = output(latchkey(
        Some(&server),
        &["queue", "stats", "jobs", "--json"],
    ))
    .await;
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        json["delayed"].as_u64().unwrap() + json["ready"].as_u64().unwrap(),
        1
    );
    let out = output(latchkey(
        Some(&server),
        &["queue", "take", "jobs", "--timeout", "10s"],
    ))
    .await;
    assert_eq!(out.status.code(), Some(0));
    let item: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(item["order"], 1001);
    // Taken and acknowledged: nothing is left, not even in flight.
    let out = output(latchkey(
        Some(&server),
        &["queue", "stats", "jobs", "--json"],
    ))
    .await;
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["delayed"], 0);
    assert_eq!(json["ready"], 0);
    assert_eq!(json["in_flight"], 0);
    let out = output(latchkey(
        Some(&server),
        &["queue", "take", "jobs", "--timeout", "0"],
    ))
    .await;
    assert_eq!(out.status.code(), Some(75));
}

/// Every duration flag is checked when the command line is read: a value past what the flag
/// (or the clock) allows is a usage error (exit 64) with a message naming the flag, never a
/// panic. (`--grace 5000000000000000h` fits a `Duration` but not the clock: it panicked with
/// "overflow when adding duration to instant", exit 101, once the lock was lost.)
#[tokio::test]
async fn every_duration_flag_is_checked_when_read() {
    let run =
        |flag: &'static str, value: &'static str| vec!["run", flag, value, "job", "--", "true"];
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (run("--grace", "5000000000000000h"), "--grace"),
        (run("--wait", "5000000000000000h"), "--wait"),
        (run("--lease", "0"), "--lease"),
        (run("--lease", "9000h"), "--lease"),
        (run("--watchdog", "10ms"), "--watchdog"),
        (run("--watchdog", "9000h"), "--watchdog"),
        (
            vec!["queue", "offer", "q", "1", "--delay", "90000h"],
            "--delay",
        ),
        (
            vec!["queue", "take", "q", "--timeout", "5000000000000000h"],
            "--timeout",
        ),
        (run("--wait", "10"), "--wait"),
    ];
    // No server: nothing may get as far as connecting.
    for (args, flag) in cases {
        let out = output(latchkey(None, &args)).await;
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(64), "{args:?}: {stderr}");
        assert!(stderr.contains(flag), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    }
    let out = output(latchkey(None, &["--help"])).await;
    assert_eq!(out.status.code(), Some(0));
}

/// `latchkey run --wait 30s` waiting for a lock when Redis stalls for 5 s (`CLIENT PAUSE 5000
/// ALL`, longer than the 3 s command timeout) waits on and runs the command once the lock is
/// free; it used to exit 125 ("did not answer within 3s").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_waits_through_a_redis_stall() {
    let server = RedisServer::spawn();
    let client = client(&server).await;
    let held = client
        .lock("stalled")
        .lock_with(latchkey_redis::LockOptions::new().lease(Duration::from_millis(1500)))
        .await
        .unwrap();
    std::mem::forget(held);
    let waiting = tokio::spawn(output(latchkey(
        Some(&server),
        &[
            "run", "--wait", "30s", "stalled", "--", "sh", "-c", "exit 7",
        ],
    )));
    // Once the command waits (listens on the lock's channel), stall the server.
    let mut conn = server.conn().await;
    let listening = latchkey_test_support::eventually(Duration::from_secs(30), || {
        let mut conn = conn.clone();
        async move {
            let (_, n): (String, i64) = redis::cmd("PUBSUB")
                .arg("NUMSUB")
                .arg("redisson_lock__channel:{stalled}")
                .query_async(&mut conn)
                .await
                .unwrap();
            n == 1
        }
    })
    .await;
    assert!(listening, "latchkey run never waited");
    let _: () = redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(5000)
        .arg("ALL")
        .query_async(&mut conn)
        .await
        .unwrap();
    let out = waiting.await.unwrap();
    assert_eq!(out.status.code(), Some(7));
}

/// `status --json` with one name of each kind, each really held: one JSON object per line, in
/// the order given, with the kind recognized and the holders, lease, token, queue and permits.
#[tokio::test]
async fn status_json_describes_every_kind() {
    let server = RedisServer::spawn();
    let client = client(&server).await;
    let lock = client.lock("l");
    let lock_guard = lock.lock().await.unwrap();
    let fair = client.fair_lock("f");
    let fair_guard = fair.lock().await.unwrap();
    // A waiter in the fair lock's line, as a Redisson (Java) `RFairLock` waiter queues itself:
    // its owner id in the queue, its deadline (server ms) in the timeout zset. Written directly,
    // it stays in line for the whole test.
    let waiter_id = "5f1f4f33-6a47-4c1b-9a55-0d4e3b6d1c2e:77";
    let mut conn = server.conn().await;
    let (now_s, _): (u64, u64) = redis::cmd("TIME").query_async(&mut conn).await.unwrap();
    let _: () = redis::pipe()
        .rpush("redisson_lock_queue:{f}", waiter_id)
        .ignore()
        .zadd("redisson_lock_timeout:{f}", waiter_id, (now_s + 600) * 1000)
        .ignore()
        .query_async(&mut conn)
        .await
        .unwrap();
    let rw = client.rw_lock("rw");
    let write = rw.write().lock().await.unwrap();
    let semaphore = client.semaphore("s");
    assert!(semaphore.try_set_permits(3).await.unwrap());
    let permits = semaphore.acquire(2).await.unwrap();
    let leased = client.permit_semaphore("p");
    assert!(leased.try_set_permits(2).await.unwrap());
    let lease = leased.acquire(1).await.unwrap();
    assert_eq!(fair.queue().await.unwrap(), [waiter_id]);

    let out = output(latchkey(
        Some(&server),
        &["status", "l", "f", "rw", "s", "p", "--json"],
    ))
    .await;
    assert_eq!(out.status.code(), Some(0));
    let lines: Vec<serde_json::Value> = stdout(&out)
        .lines()
        .map(|line| serde_json::from_str(line).expect("a JSON object per line"))
        .collect();
    assert_eq!(lines.len(), 5);
    let [l, f, w, s, p] = &lines[..] else {
        unreachable!()
    };
    assert_eq!(l["kind"], "lock");
    assert_eq!(l["holders"][0]["owner"], lock_guard.owner_id());
    assert_eq!(l["fencing_token"], lock_guard.fencing_token().get());
    assert!(l["remaining_lease_ms"].as_u64().unwrap() > 0);

    assert_eq!(f["kind"], "fair_lock");
    assert_eq!(f["holders"][0]["owner"], fair_guard.owner_id());
    assert_eq!(f["fair_queue"], serde_json::json!([waiter_id]));

    assert_eq!(w["kind"], "rw_lock");
    assert_eq!(w["mode"], "write");
    assert_eq!(w["locked"], true);
    assert_eq!(
        w["holders"][0]["owner"],
        write.owner_id(),
        "the writer's field"
    );
    assert!(write.owner_id().ends_with(":write"));
    assert_eq!(w["fencing_token"], write.fencing_token().get());

    assert_eq!(s["kind"], "semaphore");
    assert_eq!(s["available"], 1);
    assert_eq!(s["permits"], 3);

    assert_eq!(p["kind"], "permit_semaphore");
    assert_eq!(p["available"], 1);
    assert_eq!(p["leased"][0]["id"], lease.ids()[0].to_string());
    assert!(p["leased"][0]["remaining_lease_ms"].as_u64().unwrap() > 0);

    fair_guard.unlock().await.unwrap();
    drop((lock_guard, write, permits, lease));
}

/// `status --watch` with stdout not a terminal prints a stamped snapshot per read, without
/// cursor movement, and exits 0 on SIGINT.
#[tokio::test]
async fn status_watch_on_a_pipe_prints_snapshots_until_sigint() {
    use tokio::io::{AsyncBufReadExt, BufReader};

    let server = RedisServer::spawn();
    let client = client(&server).await;
    let _guard = client.lock("watched").lock().await.unwrap();
    let mut command = latchkey(Some(&server), &["status", "--watch", "watched"]);
    command.stdout(std::process::Stdio::piped());
    let mut child = command.spawn().expect("run latchkey");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut seen = Vec::new();
    let mut snapshots = 0;
    while snapshots < 3 {
        let line = tokio::time::timeout(Duration::from_secs(20), lines.next_line())
            .await
            .expect("snapshots keep coming")
            .unwrap()
            .expect("still running");
        if line.starts_with("--- ") {
            snapshots += 1;
        }
        seen.push(line);
    }
    let text = seen.join("\n");
    assert!(!text.contains('\x1b'), "no cursor movement: {text}");
    assert!(text.contains("lock      watched"), "{text}");
    assert!(text.contains("state     held by 1 owner"), "{text}");
    let pid = child.id().unwrap().to_string();
    let killed = std::process::Command::new("kill")
        .args(["-INT", &pid])
        .status()
        .unwrap();
    assert!(killed.success());
    let status = tokio::time::timeout(Duration::from_secs(20), child.wait())
        .await
        .expect("exits on SIGINT")
        .unwrap();
    assert_eq!(status.code(), Some(0), "Ctrl-C is a clean exit");
}

/// The rows of `latchkey list --json [pattern]`.
async fn list_json(url: &str, pattern: Option<&str>) -> Vec<serde_json::Value> {
    let mut args = vec!["list", "--json"];
    args.extend(pattern);
    let mut command = latchkey(None, &args);
    command.env("REDIS_URL", url);
    let out = output(command).await;
    assert_eq!(out.status.code(), Some(0));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON on stdout");
    json.as_array().expect("an array").clone()
}

fn names_and_kinds(rows: &[serde_json::Value]) -> Vec<(String, String)> {
    rows.iter()
        .map(|row| {
            (
                row["name"].as_str().unwrap().to_owned(),
                row["kind"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

/// `list` finds every kind once, with its holders and lease; the keys derived from the names
/// (fencing counters, wait queues, read leases, permit leases, queue keys) and keys of other
/// types are not listed; a pattern filters.
#[tokio::test]
async fn list_finds_every_kind_once_and_filters_by_pattern() {
    let server = RedisServer::spawn();
    let client = client(&server).await;
    let lock = client.lock("job:lock");
    let _lock = lock.lock().await.unwrap();
    // Released: the lock is gone, its fencing counter stays.
    client
        .lock("job:gone")
        .lock()
        .await
        .unwrap()
        .unlock()
        .await
        .unwrap();
    let rw = client.rw_lock("job:rw");
    let _read = rw.read().lock().await.unwrap();
    let semaphore = client.semaphore("job:sem");
    assert!(semaphore.try_set_permits(4).await.unwrap());
    let _permits = semaphore.acquire(1).await.unwrap();
    let leased = client.permit_semaphore("job:psem");
    assert!(leased.try_set_permits(2).await.unwrap());
    let _lease = leased.acquire(2).await.unwrap();
    client
        .delayed_queue::<u64>("job:queue")
        .offer(&1, Duration::from_secs(60))
        .await
        .unwrap();
    let mut conn = server.conn().await;
    let _: () = redis::cmd("RPUSH")
        .arg("job:list")
        .arg("x")
        .query_async(&mut conn)
        .await
        .unwrap();

    let rows = list_json(&server.url(), None).await;
    assert_eq!(
        names_and_kinds(&rows),
        [
            ("job:lock", "lock"),
            ("job:psem", "permit_semaphore"),
            ("job:rw", "rw_lock"),
            ("job:sem", "semaphore"),
        ]
        .map(|(n, k)| (n.to_owned(), k.to_owned()))
    );
    assert_eq!(rows[0]["holders"], 1);
    assert!(rows[0]["remaining_lease_ms"].as_u64().unwrap() > 0);
    assert_eq!(rows[1]["holders"], 2);
    assert_eq!(rows[2]["holders"], 1);
    assert_eq!(rows[3]["holders"], 1);
    assert_eq!(rows[3]["available_permits"], 3);

    let rows = list_json(&server.url(), Some("job:*sem")).await;
    assert_eq!(
        names_and_kinds(&rows),
        [("job:psem", "permit_semaphore"), ("job:sem", "semaphore")]
            .map(|(n, k)| (n.to_owned(), k.to_owned()))
    );
    assert!(list_json(&server.url(), Some("nomatch*")).await.is_empty());

    let out = output(latchkey(Some(&server), &["list", "job:l*"])).await;
    assert_eq!(out.status.code(), Some(0));
    let text = stdout(&out);
    assert!(text.starts_with("NAME"), "{text}");
    assert!(text.contains("job:lock"), "{text}");
    assert!(!text.contains("job:list"), "{text}");
}

/// On a cluster, `list` scans every primary: names spread over all three are all found.
#[tokio::test]
async fn list_on_a_cluster_finds_the_names_of_every_primary() {
    let cluster = latchkey_test_support::RedisCluster::spawn(3, 0);
    let hosts: Vec<String> = cluster.primaries().iter().map(|n| n.addr()).collect();
    let url = format!("redis+cluster://{}", hosts.join(","));
    let client = Client::connect(&url).await.expect("connect");
    let mut names = Vec::new();
    let mut guards = Vec::new();
    for i in 0..24 {
        let name = format!("shard-lock-{i:02}");
        guards.push(client.lock(name.clone()).lock().await.unwrap());
        names.push(name);
    }
    let semaphore = client.semaphore("shard-sem");
    assert!(semaphore.try_set_permits(1).await.unwrap());
    // Every primary holds some of them.
    for node in cluster.primaries() {
        let mut conn = node.conn().await;
        let size: i64 = redis::cmd("DBSIZE").query_async(&mut conn).await.unwrap();
        assert!(size > 0, "a primary without keys: the names did not spread");
    }

    let rows = list_json(&url, Some("shard-*")).await;
    let mut expected: Vec<(String, String)> = names
        .iter()
        .map(|n| (n.clone(), "lock".to_owned()))
        .collect();
    expected.push(("shard-sem".to_owned(), "semaphore".to_owned()));
    expected.sort();
    assert_eq!(names_and_kinds(&rows), expected);
    drop(guards);
}
