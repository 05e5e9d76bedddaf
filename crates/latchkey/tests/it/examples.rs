//! The runnable examples (`crates/latchkey/examples/`), run as processes against servers of
//! their own: each must exit 0, print the line that shows its point, and leave no key behind.
//!
//! The binaries are found next to this test's binary (`target/<profile>/examples/<name>`).
//! `cargo test` builds them, but `cargo test --test it` does not, and a binary left from an
//! earlier build may be stale; so the first test runs `cargo build --examples` (a no-op when
//! they are up to date) before any example is started.

use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

use latchkey_test_support::RedisServer;

use crate::helpers::read;

/// The examples are built once per run of the suite; the outcome is shared by every test.
static BUILT: OnceLock<Result<PathBuf, String>> = OnceLock::new();

/// The directory of the example binaries, after building them (with this test binary's
/// profile).
fn examples_dir() -> PathBuf {
    let built = BUILT.get_or_init(|| {
        // target/<profile>/deps/it-<hash> → target/<profile>
        let exe = std::env::current_exe().map_err(|e| format!("where is the test binary: {e}"))?;
        let profile_dir = exe
            .parent()
            .and_then(|deps| deps.parent())
            .ok_or_else(|| format!("{} is not in target/<profile>/deps", exe.display()))?;
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
        let mut build = std::process::Command::new(&cargo);
        // What cargo sets for the test process, not for a cargo it runs: some build scripts
        // (ring's) are rerun when `CARGO_MANIFEST_DIR` changes, so passing these on would make
        // this build and the next `cargo test` rebuild each other's dependencies every time.
        for (var, _) in std::env::vars_os() {
            let var = var.to_string_lossy();
            if var.starts_with("CARGO_PKG_")
                || var.starts_with("CARGO_BIN_")
                || [
                    "CARGO_MANIFEST_DIR",
                    "CARGO_MANIFEST_PATH",
                    "CARGO_CRATE_NAME",
                    "CARGO_PRIMARY_PACKAGE",
                    "CARGO_TARGET_TMPDIR",
                    "CARGO_RUSTC_CURRENT_DIR",
                    "OUT_DIR",
                ]
                .contains(&&*var)
            {
                build.env_remove(&*var);
            }
        }
        build
            .args([
                "build",
                "--quiet",
                "--examples",
                "--all-features",
                "--manifest-path",
            ])
            .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml"))
            .arg("--target-dir")
            .arg(
                profile_dir
                    .parent()
                    .expect("a profile directory is in a target directory"),
            );
        // target/debug holds the `dev` (and `test`) profile; any other directory is named
        // after its profile (`release`, a custom one).
        match profile_dir.file_name().and_then(|name| name.to_str()) {
            Some("debug") | None => {}
            Some(profile) => {
                build.args(["--profile", profile]);
            }
        }
        let status = build
            .status()
            .map_err(|e| format!("cannot run `{cargo} build --examples`: {e}"))?;
        if !status.success() {
            return Err(format!(
                "`{cargo} build -p latchkey --examples` failed ({status}); build the examples by \
                 hand to see why"
            ));
        }
        Ok(profile_dir.join("examples"))
    });
    match built {
        Ok(dir) => dir.clone(),
        Err(why) => panic!("{why}"),
    }
}

/// Runs example `name` with `env` set and waits for it (at most a minute); checks that it
/// exited 0 and returns what it printed.
async fn run_example(name: &str, env: &[(&str, String)]) -> String {
    let dir = tokio::task::spawn_blocking(examples_dir).await.unwrap();
    let binary = dir.join(name);
    assert!(
        binary.exists(),
        "{} is missing after `cargo build --examples`",
        binary.display()
    );
    let mut command = tokio::process::Command::new(&binary);
    command
        .envs(env.iter().map(|(k, v)| (k, v)))
        .kill_on_drop(true);
    let output = tokio::time::timeout(Duration::from_secs(60), command.output())
        .await
        .unwrap_or_else(|_| panic!("example {name} ran for more than a minute"))
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", binary.display()));
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "example {name} failed ({}):\n{stdout}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

/// Asserts that `server` holds no key (the examples' servers are theirs alone) but the
/// registrations of the example's clients, which expire by themselves.
fn assert_keyspace_empty(name: &str, server: &RedisServer, stdout: &str) {
    let keys: Vec<String> = read(server, &["KEYS", "*"]);
    let (registrations, left): (Vec<String>, Vec<String>) = keys
        .into_iter()
        .partition(|key| key.starts_with("latchkey_client:"));
    if !left.is_empty() {
        panic!(
            "example {name} left keys on {}: {left:?}\n{stdout}",
            server.addr()
        );
    }
    for key in registrations {
        let pttl: i64 = read(server, &["PTTL", &key]);
        assert!(pttl > 0, "{key} expires by itself: {pttl}");
    }
}

/// Runs example `name` against a server of its own; checks that it printed `line` and left
/// the server's keyspace empty. Returns what it printed.
async fn check_example(name: &str, line: &str) -> String {
    let server = RedisServer::spawn();
    let stdout = run_example(name, &[("REDIS_URL", server.url())]).await;
    assert!(
        stdout.contains(line),
        "example {name} did not print {line:?}:\n{stdout}"
    );
    assert_keyspace_empty(name, &server, &stdout);
    stdout
}

/// The number that follows `before` on the line of `stdout` that starts with `line`.
fn number_after(stdout: &str, line: &str, before: &str) -> u64 {
    let found = stdout
        .lines()
        .find(|l| l.starts_with(line))
        .unwrap_or_else(|| panic!("no line {line:?} in:\n{stdout}"));
    let rest = &found[found
        .find(before)
        .unwrap_or_else(|| panic!("no {before:?} in {found:?}"))
        + before.len()..];
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits
        .parse()
        .unwrap_or_else(|e| panic!("no number after {before:?} in {found:?}: {e}"))
}

#[tokio::test]
async fn fencing_refuses_the_stale_holder() {
    let stdout = check_example("fencing", "A's stale write refused: token ").await;
    let refused = "A's stale write refused:";
    let (a, newest) = (
        number_after(&stdout, refused, "token "),
        number_after(&stdout, refused, "is older than "),
    );
    assert!(a < newest, "{a} is refused for {newest}:\n{stdout}");
    assert_eq!(a, number_after(&stdout, "A holds", "token "), "{stdout}");
    assert_eq!(
        newest,
        number_after(&stdout, "B took", "token "),
        "{stdout}"
    );
}

#[tokio::test]
async fn delayed_queue_acks_retries_and_dead_letters() {
    check_example(
        "delayed_queue",
        "finished: 3 done, 1 dead-lettered, 1 undecodable set aside",
    )
    .await;
}

#[tokio::test]
async fn nightly_report_is_written_on_one_node() {
    let stdout = check_example("nightly_report", "each written on exactly one node").await;
    let tokens: Vec<u64> = stdout
        .lines()
        .filter(|l| l.contains(": report due at "))
        .map(|l| number_after(l, "node ", "fencing token "))
        .collect();
    assert!(tokens.len() >= 3, "{stdout}");
    assert!(
        tokens.windows(2).all(|w| w[0] < w[1]),
        "tokens {tokens:?} do not increase:\n{stdout}"
    );
}

#[tokio::test]
async fn axum_rate_limit_answers_429_with_retry_after() {
    let stdout = check_example(
        "axum_rate_limit",
        "the per-key limit held: 3 of 5 admitted, the others told to retry in 1 s",
    )
    .await;
    assert!(
        stdout.contains("key noisy, request 4: 429, retry-after: 1, ratelimit-limit: 3"),
        "{stdout}"
    );
}

#[tokio::test]
async fn fair_lock_serves_in_arrival_order() {
    check_example("fair_lock", "served in order [0, 1, 2, 3, 4]").await;
}

#[tokio::test]
async fn semaphore_budget_is_never_exceeded() {
    check_example("semaphore_budget", "available at the end: 3").await;
}

#[tokio::test]
async fn latch_barrier_holds_back_until_all_arrive() {
    check_example("latch_barrier", "gave up: 1 worker(s) never arrived").await;
}

#[tokio::test]
async fn rw_cache_has_no_torn_read_under_the_lock() {
    check_example("rw_cache", "with the read-write lock: 0 torn read(s)").await;
}

#[tokio::test]
async fn worker_lost_stops_the_job() {
    check_example("worker_lost", "[forced] lock lost: job stopped").await;
}

#[tokio::test]
async fn redlock_over_three_servers() {
    let servers = [
        RedisServer::spawn(),
        RedisServer::spawn(),
        RedisServer::spawn(),
    ];
    let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
    let stdout = run_example("redlock", &[("REDIS_URLS", urls.join(","))]).await;
    for line in [
        "3 nodes, quorum 2",
        "B is refused while A holds it",
        "after A let go, B holds it with token ",
    ] {
        assert!(
            stdout.contains(line),
            "redlock did not print {line:?}:\n{stdout}"
        );
    }
    let a = number_after(&stdout, "A holds", "token ");
    let b = number_after(&stdout, "after A let go", "token ");
    assert!(b > a, "B's token {b} after A's {a}:\n{stdout}");
    for server in &servers {
        assert_keyspace_empty("redlock", server, &stdout);
    }
}
