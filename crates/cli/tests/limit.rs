//! `latchkey limit`, and rate limiters and job groups in `latchkey list` and `latchkey status`,
//! against a real redis-server; what the command did is checked through the library.

use std::process::Output;
use std::time::Duration;

use latchkey_redis::{Client, RateConfig, RateType, Run};
use latchkey_test_support::{eventually, RedisServer};
use tokio::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_latchkey");

/// `latchkey <args>` against `server`, its output printed for a failing test.
async fn latchkey(server: &RedisServer, args: &[&str]) -> Output {
    let out = Command::new(BIN)
        .env("REDIS_URL", server.url())
        .args(args)
        .kill_on_drop(true)
        .output()
        .await
        .expect("run latchkey");
    eprintln!(
        "--- latchkey {args:?} exited {:?}\n--- stdout:\n{}--- stderr:\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn json(out: &Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout).expect("JSON on stdout")
}

async fn client(server: &RedisServer) -> Client {
    Client::connect(server.url()).await.expect("connect")
}

/// `limit` says when no rate is set, shows the rate and the permits left, and `--set` replaces
/// the config and restarts the window (as the library's `set_rate` does).
#[tokio::test]
async fn limit_shows_and_sets_a_rate() {
    let server = RedisServer::spawn();
    let client = client(&server).await;
    let limiter = client.rate_limiter("geocoder");

    let out = latchkey(&server, &["limit", "geocoder"]).await;
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("`geocoder` has no rate set"));

    let out = latchkey(&server, &["limit", "geocoder", "--set", "100/1m"]).await;
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(
        stdout(&out),
        "limiter   geocoder\n\
         rate      100 per 1m, one budget for every client (overall)\n\
         available 100 of 100 permits now (the last 1m)\n\
         keepalive none: kept until deleted\n"
    );
    assert!(stderr(&out).contains("its window starts again"));
    assert_eq!(
        limiter.rate().await.unwrap(),
        Some(RateConfig::new(
            RateType::Overall,
            100,
            Duration::from_secs(60)
        ))
    );

    limiter.acquire(30).await.unwrap();
    let out = latchkey(&server, &["limit", "geocoder", "--json"]).await;
    assert_eq!(out.status.code(), Some(0));
    let shown = json(&out);
    assert_eq!(shown["limiter"], "geocoder");
    assert_eq!(shown["kind"], "rate_limiter");
    assert_eq!(shown["rate"], 100);
    assert_eq!(shown["interval_ms"], 60_000);
    assert_eq!(shown["rate_type"], "overall");
    assert_eq!(shown["keep_alive_ms"], serde_json::Value::Null);
    assert_eq!(shown["available"], 70);

    // The same rate again: the window starts again, empty.
    let out = latchkey(&server, &["limit", "geocoder", "--set", "100/1m", "--json"]).await;
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(json(&out)["available"], 100);
    assert_eq!(limiter.available_permits().await.unwrap(), 100);

    let out = latchkey(
        &server,
        &[
            "limit",
            "geocoder",
            "--set",
            "10/1s",
            "--per-client",
            "--keep-alive",
            "1h",
        ],
    )
    .await;
    assert_eq!(out.status.code(), Some(0));
    assert!(
        stdout(&out).contains(
            "rate      10 per 1s for each client (per client)\n\
             available per client: each client has a window of its own\n\
             keepalive 1h: deleted once unused that long\n"
        ),
        "{}",
        stdout(&out)
    );
    assert_eq!(
        limiter.rate().await.unwrap(),
        Some(
            RateConfig::new(RateType::PerClient, 10, Duration::from_secs(1))
                .with_keep_alive(Duration::from_secs(3600))
        )
    );
}

/// A bad `--set` is a usage error (exit 64) with a reason, and nothing changes: the rate and
/// the permits taken stay. A name that holds a lock is refused, and the lock stays held.
#[tokio::test]
async fn limit_refuses_bad_input_and_changes_nothing() {
    let server = RedisServer::spawn();
    let client = client(&server).await;
    let limiter = client.rate_limiter("geocoder");
    let config = RateConfig::new(RateType::Overall, 5, Duration::from_secs(60));
    assert!(limiter.try_set_rate_with(config).await.unwrap());
    limiter.acquire(2).await.unwrap();

    for (args, reason) in [
        (
            &["--set", "0/1s"][..],
            "a rate of 0 would never grant a permit",
        ),
        (&["--set", "abc"][..], "`abc` is not RATE/INTERVAL"),
        (&["--set", "x/1s"][..], "`x` is not a number of permits"),
        (&["--set", "5/0"][..], "the interval must be 1ms"),
        (
            &["--set", "5/1.5ms"][..],
            "not a whole number of milliseconds",
        ),
        (&["--set", "5/10"][..], "has no unit"),
        (
            &["--set", "5/1m", "--keep-alive", "10s"][..],
            "shorter than the interval",
        ),
        (&["--per-client"][..], "--set"),
    ] {
        let mut all = vec!["limit", "geocoder"];
        all.extend(args);
        let out = latchkey(&server, &all).await;
        assert_eq!(out.status.code(), Some(64), "{args:?}");
        assert!(stderr(&out).contains(reason), "{args:?}: {}", stderr(&out));
    }
    assert_eq!(limiter.rate().await.unwrap(), Some(config));
    assert_eq!(limiter.available_permits().await.unwrap(), 3);

    let guard = client.lock("held").lock().await.unwrap();
    let out = latchkey(&server, &["limit", "held", "--set", "5/1s"]).await;
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("`held` holds a lock, not a rate limiter"));
    assert!(client.lock("held").is_locked().await.unwrap());
    assert_eq!(client.rate_limiter("held").rate().await.unwrap(), None);
    guard.unlock().await.unwrap();
}

/// `list` shows a rate limiter as a row (its rate, the permits given out and left) and a job
/// group as one row (its jobs, the node running one now); the limiter's windows are not
/// listed. `status` shows a limiter's rate and a group's jobs.
#[tokio::test]
async fn list_and_status_show_rate_limiters_and_job_groups() {
    let server = RedisServer::spawn();
    let client = client(&server).await;
    let geocoder = client.rate_limiter("geocoder");
    assert!(geocoder
        .try_set_rate(RateType::Overall, 100, Duration::from_secs(60))
        .await
        .unwrap());
    geocoder.acquire(40).await.unwrap();
    let exports = client.rate_limiter("exports");
    assert!(exports
        .try_set_rate(RateType::PerClient, 5, Duration::from_secs(1))
        .await
        .unwrap());
    exports.acquire(1).await.unwrap();

    // A node of the group `nightly`: `sweep` runs (for a minute) from its first occurrence on.
    let node = Client::builder(server.url())
        .client_name("nightly-node")
        .connect()
        .await
        .unwrap();
    let scheduler = node.scheduler("nightly");
    scheduler
        .every("sweep", Duration::from_secs(1), |_: Run| async {
            tokio::time::sleep(Duration::from_secs(60)).await;
            Ok::<(), String>(())
        })
        .unwrap();
    scheduler
        .every("report", Duration::from_secs(3600), |_: Run| async {
            Ok::<(), String>(())
        })
        .unwrap();
    let running = tokio::spawn({
        let scheduler = scheduler.clone();
        async move { scheduler.run().await }
    });
    assert!(
        eventually(Duration::from_secs(10), || async {
            let jobs = client.scheduler("nightly").jobs().await.unwrap();
            jobs.iter().any(|job| job.running.is_some())
        })
        .await,
        "`sweep` runs"
    );

    let out = latchkey(&server, &["list", "--json"]).await;
    assert_eq!(out.status.code(), Some(0));
    let rows = json(&out);
    let rows = rows.as_array().expect("an array");
    let kinds: Vec<(&str, &str)> = rows
        .iter()
        .map(|row| (row["name"].as_str().unwrap(), row["kind"].as_str().unwrap()))
        .collect();
    assert_eq!(
        kinds,
        [
            ("exports", "rate_limiter"),
            ("geocoder", "rate_limiter"),
            ("nightly", "jobs")
        ],
        "the windows and the group's keys are not names"
    );
    assert_eq!(rows[0]["rate_type"], "per_client");
    assert_eq!(rows[0]["available_permits"], serde_json::Value::Null);
    assert_eq!(rows[1]["rate"], 100);
    assert_eq!(rows[1]["interval_ms"], 60_000);
    assert_eq!(rows[1]["holders"], 40);
    assert_eq!(rows[1]["available_permits"], 60);
    assert_eq!(rows[2]["jobs"], 2);
    assert_eq!(rows[2]["holders"], 1);
    assert_eq!(rows[2]["running"][0]["job"], "sweep");
    assert_eq!(rows[2]["holder"]["client"]["name"], "nightly-node");

    let out = latchkey(&server, &["list"]).await;
    assert_eq!(out.status.code(), Some(0));
    let text = stdout(&out);
    let line = |name: &str| {
        text.lines()
            .find(|l| l.starts_with(&format!("{name} ")))
            .unwrap_or_else(|| panic!("a row for {name}: {text}"))
            .to_owned()
    };
    assert!(text.starts_with("NAME"), "{text}");
    assert!(line("exports").ends_with("5 per 1s per client"), "{text}");
    let geocoder_row = line("geocoder");
    assert!(geocoder_row.contains(" rate_limiter "), "{text}");
    assert!(geocoder_row.ends_with("100 per 1m, 60 left"), "{text}");
    let nightly_row = line("nightly");
    assert!(nightly_row.contains(" jobs "), "{text}");
    assert!(
        nightly_row.contains("2 jobs; sweep running on nightly-node on "),
        "{text}"
    );

    let out = latchkey(&server, &["status", "geocoder", "nightly"]).await;
    assert_eq!(out.status.code(), Some(0));
    let text = stdout(&out);
    assert!(
        text.starts_with(
            "limiter   geocoder\n\
             rate      100 per 1m, one budget for every client (overall)\n\
             available 60 of 100 permits now (the last 1m)\n"
        ),
        "{text}"
    );
    assert!(
        text.contains(
            "jobs      nightly (job group of 2 jobs, as `latchkey jobs nightly` shows)\n"
        ),
        "{text}"
    );
    assert!(
        text.contains("job       report\nschedule  every 3600000 ms\n"),
        "{text}"
    );
    assert!(
        text.contains("job       sweep\nschedule  every 1000 ms\n"),
        "{text}"
    );
    assert!(text.contains("running   due "), "{text}");

    let out = latchkey(&server, &["status", "geocoder", "nightly", "--json"]).await;
    assert_eq!(out.status.code(), Some(0));
    let lines: Vec<serde_json::Value> = stdout(&out)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines[0]["kind"], "rate_limiter");
    assert_eq!(lines[0]["available"], 60);
    assert_eq!(lines[1]["kind"], "jobs");
    assert_eq!(lines[1]["group"], "nightly");
    assert_eq!(lines[1]["jobs"].as_array().unwrap().len(), 2);
    running.abort();
}
