//! `latchkey elect` and `latchkey leader` against real redis-servers.

use std::process::{Output, Stdio};
use std::time::Duration;

use latchkey_redis::Client;
use latchkey_test_support::{eventually, RedisServer};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_latchkey");

/// `latchkey <args>` with REDIS_URL set to `server`.
fn latchkey(server: &RedisServer, args: &[&str]) -> Command {
    let mut command = Command::new(BIN);
    command
        .env("REDIS_URL", server.url())
        .args(args)
        .kill_on_drop(true);
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

async fn client(server: &RedisServer) -> Client {
    Client::connect(server.url()).await.expect("connect")
}

#[tokio::test]
async fn elect_runs_the_command_as_leader_with_its_term_and_resigns() {
    let server = RedisServer::spawn();
    let script = "echo \"term=$LATCHKEY_TERM token=$LATCHKEY_FENCING_TOKEN \
                  election=$LATCHKEY_ELECTION\"; exit 3";
    let out = output(latchkey(
        &server,
        &[
            "elect", "--value", "node-a", "jobs", "--", "sh", "-c", script,
        ],
    ))
    .await;
    assert_eq!(out.status.code(), Some(3), "the command's status");
    let text = String::from_utf8_lossy(&out.stdout);
    let words: Vec<&str> = text.split_whitespace().collect();
    let [term, token, election] = words[..] else {
        panic!("three words: {text}")
    };
    let term: u64 = term
        .strip_prefix("term=")
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| panic!("a term: {text}"));
    assert!(term > 0);
    assert_eq!(
        token,
        format!("token={term}"),
        "the term is the fencing token"
    );
    assert_eq!(election, "election=jobs");
    let election = client(&server).await.election("jobs");
    assert_eq!(election.leader().await.unwrap(), None, "resigned");
    let out = output(latchkey(
        &server,
        &["elect", "jobs", "--", "sh", "-c", "echo $LATCHKEY_TERM"],
    ))
    .await;
    assert_eq!(out.status.code(), Some(0));
    let next: u64 = String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .expect("a term");
    assert!(next > term, "terms go up: {term} then {next}");
}

/// Four processes campaign at once: each leads in turn (standbys wait), their commands never
/// overlap, and the terms increase in the order they led.
#[tokio::test]
async fn standbys_take_turns_without_overlap_and_terms_increase() {
    let server = RedisServer::spawn();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    let script = format!(
        "s=$(date +%s%N); sleep 0.2; e=$(date +%s%N); echo \"$s $e $LATCHKEY_TERM\" >> {}",
        log.display()
    );
    let mut children = Vec::new();
    for _ in 0..4 {
        children.push(
            latchkey(&server, &["elect", "turns", "--", "sh", "-c", &script])
                .spawn()
                .unwrap(),
        );
    }
    for mut child in children {
        assert!(child.wait().await.unwrap().success());
    }
    let text = std::fs::read_to_string(&log).unwrap();
    let mut sections: Vec<(u128, u128, u64)> = text
        .lines()
        .map(|line| {
            let parts: Vec<&str> = line.split_whitespace().collect();
            (
                parts[0].parse().unwrap(),
                parts[1].parse().unwrap(),
                parts[2].parse().unwrap(),
            )
        })
        .collect();
    assert_eq!(sections.len(), 4, "log:\n{text}");
    sections.sort();
    for pair in sections.windows(2) {
        assert!(pair[0].1 <= pair[1].0, "leaders overlap:\n{text}");
        assert!(pair[0].2 < pair[1].2, "terms go down:\n{text}");
    }
}

#[tokio::test]
async fn elect_with_wait_zero_while_another_leads_is_busy() {
    let server = RedisServer::spawn();
    let client = client(&server).await;
    let leadership = client.election("busy").campaign("node-a").await.unwrap();
    let out = output(latchkey(
        &server,
        &["elect", "--wait", "0", "busy", "--", "true"],
    ))
    .await;
    assert_eq!(out.status.code(), Some(75));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("(led by node-a, term {})", leadership.term())),
        "{stderr}"
    );
    leadership.resign().await.unwrap();
    let out = output(latchkey(
        &server,
        &["elect", "--wait", "0", "busy", "--", "true"],
    ))
    .await;
    assert_eq!(out.status.code(), Some(0));
}

/// The leadership is taken away while the command runs (the key deleted behind its back):
/// the command is stopped and latchkey exits 76.
#[tokio::test]
async fn elect_stops_the_command_when_the_leadership_is_lost() {
    let server = RedisServer::spawn();
    let client = client(&server).await;
    let election = client.election("short");
    let child = latchkey(
        &server,
        &[
            "elect",
            "--watchdog",
            "1s",
            "--grace",
            "1s",
            "short",
            "--",
            "sleep",
            "30",
        ],
    )
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    assert!(
        eventually(Duration::from_secs(10), || {
            let election = election.clone();
            async move { election.leader().await.unwrap().is_some() }
        })
        .await
    );
    let mut conn = server.conn().await;
    let _: () = redis::cmd("DEL")
        .arg("latchkey_election:{short}")
        .query_async(&mut conn)
        .await
        .unwrap();
    let out = tokio::time::timeout(Duration::from_secs(20), child.wait_with_output())
        .await
        .expect("stopped well before the command's 30 s")
        .unwrap();
    assert_eq!(out.status.code(), Some(76));
    assert!(String::from_utf8_lossy(&out.stderr).contains("LOST"));
}

/// The next line `latchkey leader --watch` prints (within a hang guard).
async fn next_line(lines: &mut tokio::io::Lines<BufReader<tokio::process::ChildStdout>>) -> String {
    tokio::time::timeout(Duration::from_secs(10), lines.next_line())
        .await
        .expect("a line within the hang guard")
        .unwrap()
        .expect("still watching")
}

#[tokio::test]
async fn leader_prints_the_leader_and_watch_follows_every_change() {
    let server = RedisServer::spawn();
    let out = output(latchkey(&server, &["leader", "watched"])).await;
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "no leader");

    let mut watch = latchkey(&server, &["leader", "--watch", "watched"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(watch.stdout.take().unwrap()).lines();
    assert_eq!(next_line(&mut lines).await, "no leader");
    let client = client(&server).await;
    let mut leadership = client.election("watched").campaign("node-a").await.unwrap();
    let first = leadership.term();
    leadership.proclaim("node-a2").await.unwrap();
    leadership.resign().await.unwrap();
    assert_eq!(
        next_line(&mut lines).await,
        format!("leader node-a term {first}")
    );
    assert_eq!(
        next_line(&mut lines).await,
        format!("leader node-a2 term {first}"),
        "a proclamation keeps the term"
    );
    assert_eq!(next_line(&mut lines).await, "no leader");
    watch.kill().await.unwrap();

    let leadership = client.election("watched").campaign("node-b").await.unwrap();
    let second = leadership.term();
    assert!(second > first, "terms go up: {first} then {second}");
    let out = output(latchkey(&server, &["leader", "--json", "watched"])).await;
    let parsed: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(parsed["election"], "watched");
    assert_eq!(parsed["leader"], "node-b");
    assert_eq!(parsed["term"], second);
    // Who leads: the campaign's owner id and what its client registered (this process).
    let owner = parsed["owner"].as_str().unwrap();
    assert!(owner.starts_with(&format!("{}:", client.id())), "{owner}");
    assert_eq!(parsed["client"]["id"], client.id());
    assert_eq!(parsed["client"]["pid"], std::process::id());
    let out = output(latchkey(&server, &["leader", "watched"])).await;
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(&format!("\nclient {owner}: "))
            && text.contains(&format!("pid {}", std::process::id())),
        "{text}"
    );
    leadership.resign().await.unwrap();

    let out = output(latchkey(&server, &["leader", ""])).await;
    assert_eq!(out.status.code(), Some(1), "a bad name is an error");
}
