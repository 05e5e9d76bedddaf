//! `Client::scheduler`: each occurrence of a job runs on exactly one node of a group — across
//! node deaths (a retry with a higher token), downtime (the missed-runs policies), shutdowns
//! (runs handed back) and Redis restarts.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use latchkey_redis::{Client, JobOptions, Missed, Overlap, Run, Schedule, Scheduler};
use latchkey_test_support::{FaultProxy, RedisServer};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::helpers::{builder, eventually};

/// One run as a handler saw it.
#[derive(Clone, Debug)]
struct Seen {
    node: usize,
    due: SystemTime,
    token: u64,
    attempt: u32,
    started: std::time::Instant,
    ended: Option<std::time::Instant>,
}

type Log = Arc<Mutex<Vec<Seen>>>;

/// A node: a client of its own (1 s watchdog) running `group` until stopped.
struct Node {
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<latchkey_redis::Result<()>>,
}

impl Node {
    async fn stop(mut self) {
        let _ = self.stop.take().expect("running").send(());
        self.task.await.unwrap().unwrap();
    }
}

async fn node_client(url: &str) -> Client {
    node_client_with(url, Duration::from_secs(1)).await
}

async fn node_client_with(url: &str, watchdog: Duration) -> Client {
    Client::builder(url)
        .watchdog_timeout(watchdog)
        .subscription_linger(Duration::from_millis(50))
        .connect()
        .await
        .unwrap()
}

/// Starts node `n` of `group` at `url` with one job, whose handler logs its run and works
/// for `work`.
async fn start_node(
    url: &str,
    group: &str,
    n: usize,
    schedule: Schedule,
    options: JobOptions,
    work: Duration,
    log: &Log,
) -> Node {
    start_node_with(
        url,
        group,
        n,
        schedule,
        options,
        work,
        log,
        Duration::from_secs(1),
    )
    .await
}

/// [`start_node`] with another watchdog timeout (the runs' lease).
#[allow(clippy::too_many_arguments)]
async fn start_node_with(
    url: &str,
    group: &str,
    n: usize,
    schedule: Schedule,
    options: JobOptions,
    work: Duration,
    log: &Log,
    watchdog: Duration,
) -> Node {
    let client = node_client_with(url, watchdog).await;
    let scheduler = client.scheduler(group);
    scheduler.shutdown_grace(Duration::from_millis(200));
    let log = log.clone();
    scheduler
        .job("job", schedule, options, move |run: Run| {
            let log = log.clone();
            async move {
                let at = {
                    let mut log = log.lock().unwrap();
                    log.push(Seen {
                        node: n,
                        due: run.due(),
                        token: run.fencing_token().get(),
                        attempt: run.attempt(),
                        started: std::time::Instant::now(),
                        ended: None,
                    });
                    log.len() - 1
                };
                tokio::time::sleep(work).await;
                log.lock().unwrap()[at].ended = Some(std::time::Instant::now());
                Ok::<(), String>(())
            }
        })
        .unwrap();
    let (stop, stopped) = oneshot::channel();
    let task = tokio::spawn(async move {
        scheduler
            .run_until(async {
                let _ = stopped.await;
            })
            .await
    });
    Node {
        stop: Some(stop),
        task,
    }
}

fn every(ms: u64) -> Schedule {
    Schedule::every(Duration::from_millis(ms)).unwrap()
}

/// Three nodes, a 1 s job, 60 occurrences: each ran exactly once, on one node, none missed,
/// with tokens increasing with the due time, and no two runs overlapped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_nodes_run_each_occurrence_once() {
    let server = RedisServer::spawn();
    let log: Log = Arc::default();
    let mut nodes = Vec::new();
    for n in 0..3 {
        nodes.push(
            start_node(
                &server.url(),
                "fleet",
                n,
                every(1000),
                JobOptions::new(),
                Duration::from_millis(100),
                &log,
            )
            .await,
        );
    }
    assert!(
        eventually(Duration::from_secs(90), || async {
            log.lock().unwrap().len() >= 60
        })
        .await,
        "60 occurrences ran"
    );
    for node in nodes {
        node.stop().await;
    }
    let log = log.lock().unwrap().clone();
    let mut by_due: BTreeMap<SystemTime, Vec<&Seen>> = BTreeMap::new();
    for seen in &log {
        by_due.entry(seen.due).or_default().push(seen);
    }
    assert!(
        by_due.values().all(|runs| runs.len() == 1),
        "an occurrence ran twice: {log:?}"
    );
    let dues: Vec<SystemTime> = by_due.keys().copied().collect();
    for pair in dues.windows(2) {
        assert_eq!(
            pair[1].duration_since(pair[0]).unwrap(),
            Duration::from_secs(1),
            "consecutive occurrences, none missed: {dues:?}"
        );
    }
    let tokens: Vec<u64> = by_due.values().map(|runs| runs[0].token).collect();
    for pair in tokens.windows(2) {
        assert!(
            pair[1] > pair[0],
            "tokens increase with the due time: {tokens:?}"
        );
    }
    let mut runs: Vec<&Seen> = log.iter().collect();
    runs.sort_by_key(|s| s.started);
    for pair in runs.windows(2) {
        assert!(
            pair[0].ended.is_none_or(|end| end <= pair[1].started),
            "runs overlapped: {pair:?}"
        );
    }
    let nodes_used: std::collections::BTreeSet<usize> = log.iter().map(|s| s.node).collect();
    assert!(
        nodes_used.len() > 1,
        "the nodes shared the work: {nodes_used:?}"
    );
}

/// A node that stops answering (black-holed) while it runs an occurrence: its lease runs out,
/// its `lost()` fires, and another node runs the same occurrence again, attempt 2, with a
/// higher token. The stalled node's late ending is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_nodes_occurrence_is_retried_with_a_higher_token() {
    let server = RedisServer::spawn();
    let proxy = FaultProxy::start(&server.addr());
    let log: Log = Arc::default();
    let lost = Arc::new(Mutex::new(false));
    // Node 0, through the proxy: its run never ends by itself.
    let stalled = {
        let client = node_client(&proxy.url()).await;
        let scheduler = client.scheduler("retry");
        let (log, lost) = (log.clone(), lost.clone());
        scheduler
            .job("job", every(2000), JobOptions::new(), move |run: Run| {
                let (log, lost) = (log.clone(), lost.clone());
                async move {
                    log.lock().unwrap().push(Seen {
                        node: 0,
                        due: run.due(),
                        token: run.fencing_token().get(),
                        attempt: run.attempt(),
                        started: std::time::Instant::now(),
                        ended: None,
                    });
                    // Watched from a task of its own: the run's future is dropped when the
                    // claim is lost.
                    let signal = run.lost();
                    tokio::spawn(async move {
                        signal.await;
                        *lost.lock().unwrap() = true;
                    });
                    std::future::pending::<()>().await;
                    Ok::<(), String>(())
                }
            })
            .unwrap();
        tokio::spawn(async move { scheduler.run().await })
    };
    assert!(
        eventually(Duration::from_secs(10), || async {
            !log.lock().unwrap().is_empty()
        })
        .await,
        "node 0 claimed an occurrence"
    );
    proxy.blackhole(true);
    let first = log.lock().unwrap()[0].clone();
    let other = start_node(
        &server.url(),
        "retry",
        1,
        every(2000),
        JobOptions::new(),
        Duration::from_millis(50),
        &log,
    )
    .await;
    assert!(
        eventually(Duration::from_secs(10), || async {
            log.lock()
                .unwrap()
                .iter()
                .any(|s| s.node == 1 && s.due == first.due)
        })
        .await,
        "node 1 retried the occurrence: {:?}",
        log.lock().unwrap()
    );
    let retry = log
        .lock()
        .unwrap()
        .iter()
        .find(|s| s.node == 1 && s.due == first.due)
        .cloned()
        .unwrap();
    assert_eq!(retry.attempt, 2);
    assert!(retry.token > first.token, "{retry:?} after {first:?}");
    assert!(*lost.lock().unwrap(), "the stalled node was told lost()");
    // The job's state: the retry is the last run of that occurrence (or a later one ran).
    let observer = node_client(&server.url()).await;
    let jobs = observer.scheduler("retry").jobs().await.unwrap();
    assert_eq!(jobs.len(), 1);
    assert_eq!(jobs[0].schedule, "every 2000 ms");
    other.stop().await;
    stalled.abort();
}

/// Downtime: every node stopped for ~5 occurrences of a 1 s job, then started again. `Skip`
/// runs none of the missed ones (the next run is due after the restart), `RunOnce` one run
/// for all of them (the latest due), `RunEach { max: 3 }` the last three, oldest first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missed_occurrences_follow_the_jobs_policy() {
    let server = RedisServer::spawn();
    let policies = [
        ("skip", Missed::Skip),
        ("once", Missed::RunOnce),
        ("each", Missed::RunEach { max: 3 }),
    ];
    let logs: Vec<Log> = policies.iter().map(|_| Log::default()).collect();
    let start_all = |logs: &Vec<Log>| {
        let url = server.url();
        let logs = logs.clone();
        async move {
            let mut nodes = Vec::new();
            for ((group, missed), log) in policies.iter().zip(&logs) {
                nodes.push(
                    start_node(
                        &url,
                        group,
                        0,
                        every(1000),
                        JobOptions::new().missed(*missed),
                        Duration::ZERO,
                        log,
                    )
                    .await,
                );
            }
            nodes
        }
    };
    let nodes = start_all(&logs).await;
    assert!(
        eventually(Duration::from_secs(10), || async {
            logs.iter().all(|log| !log.lock().unwrap().is_empty())
        })
        .await
    );
    for node in nodes {
        node.stop().await;
    }
    let before: Vec<usize> = logs.iter().map(|log| log.lock().unwrap().len()).collect();
    let last_due: Vec<SystemTime> = logs
        .iter()
        .map(|log| log.lock().unwrap().last().unwrap().due)
        .collect();
    tokio::time::sleep(Duration::from_millis(5500)).await;
    let restarted = SystemTime::now();
    let nodes = start_all(&logs).await;
    tokio::time::sleep(Duration::from_millis(800)).await;
    for node in nodes {
        node.stop().await;
    }
    let after = |i: usize| -> Vec<Seen> { logs[i].lock().unwrap()[before[i]..].to_vec() };
    // Skip: nothing ran for the missed occurrences.
    assert!(
        after(0)
            .iter()
            .all(|s| s.due >= restarted - Duration::from_millis(1000)),
        "skip ran a missed occurrence: {:?}",
        after(0)
    );
    let skipped = {
        let observer = node_client(&server.url()).await;
        observer.scheduler("skip").jobs().await.unwrap()[0].skipped
    };
    assert!(
        skipped >= 4,
        "the missed occurrences were counted: {skipped}"
    );
    // RunOnce: one run, of the latest occurrence due at the restart.
    let once = after(1);
    assert!(!once.is_empty(), "run once ran");
    assert!(
        once[0].due > last_due[1] + Duration::from_secs(3),
        "the latest missed occurrence, not the oldest: {once:?}"
    );
    let catch_up: Vec<&Seen> = once.iter().filter(|s| s.due < restarted).collect();
    assert_eq!(catch_up.len(), 1, "one catch-up run: {once:?}");
    // RunEach { max: 3 }: three runs of the missed occurrences, oldest first, one second apart.
    let each = after(2);
    let missed: Vec<SystemTime> = each
        .iter()
        .filter(|s| s.due < restarted - Duration::from_millis(1000))
        .map(|s| s.due)
        .collect();
    assert_eq!(missed.len(), 3, "three missed occurrences ran: {each:?}");
    assert!(missed
        .windows(2)
        .all(|w| w[1].duration_since(w[0]).unwrap() == Duration::from_secs(1)));
}

/// A run still going on when the next occurrence comes due: `Overlap::Skip` skips it,
/// `Overlap::Queue` runs it once the run ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_occurrence_due_during_a_run_is_skipped_or_queued() {
    let server = RedisServer::spawn();
    let (skip, queue) = (Log::default(), Log::default());
    let a = start_node(
        &server.url(),
        "overlap-skip",
        0,
        every(1000),
        JobOptions::new().overlap(Overlap::Skip),
        Duration::from_millis(1500),
        &skip,
    )
    .await;
    let b = start_node(
        &server.url(),
        "overlap-queue",
        0,
        every(1000),
        JobOptions::new().overlap(Overlap::Queue),
        Duration::from_millis(1500),
        &queue,
    )
    .await;
    tokio::time::sleep(Duration::from_millis(6500)).await;
    a.stop().await;
    b.stop().await;
    for log in [&skip, &queue] {
        let log = log.lock().unwrap();
        let mut runs: Vec<&Seen> = log.iter().collect();
        runs.sort_by_key(|s| s.started);
        for pair in runs.windows(2) {
            assert!(
                pair[0].ended.is_none_or(|end| end <= pair[1].started),
                "never two runs at once: {pair:?}"
            );
        }
    }
    let skip = skip.lock().unwrap();
    assert!(
        skip.windows(2)
            .all(|w| w[1].due.duration_since(w[0].due).unwrap() >= Duration::from_secs(2)),
        "skip: the occurrence due during a run did not run: {skip:?}"
    );
    let queue = queue.lock().unwrap();
    assert!(
        queue
            .windows(2)
            .any(|w| w[1].due.duration_since(w[0].due).unwrap() == Duration::from_secs(1)),
        "queue: the occurrence due during a run ran after it: {queue:?}"
    );
}

/// A node told to stop while a run goes on: a short run finishes within the grace; a long one
/// is handed back, and another node runs that occurrence at once, attempt 2.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopping_node_hands_back_what_it_cannot_finish() {
    let server = RedisServer::spawn();
    let log: Log = Arc::default();
    let first = start_node(
        &server.url(),
        "handback",
        0,
        every(2000),
        JobOptions::new().missed(Missed::RunOnce),
        Duration::from_secs(30),
        &log,
    )
    .await;
    assert!(
        eventually(Duration::from_secs(5), || async {
            !log.lock().unwrap().is_empty()
        })
        .await
    );
    first.stop().await; // grace 200 ms: the 30 s run is handed back
                        // Handed back (the run's lease ended) before `run_until` returned, not later in the
                        // background.
    let mut conn = server.conn().await;
    let leased: bool = redis::cmd("EXISTS")
        .arg("latchkey_job_run:{handback}:job")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(!leased, "the run's lease ended when the node stopped");
    let second = start_node(
        &server.url(),
        "handback",
        1,
        every(2000),
        JobOptions::new(),
        Duration::from_millis(10),
        &log,
    )
    .await;
    assert!(
        eventually(Duration::from_secs(5), || async {
            log.lock().unwrap().iter().any(|s| s.node == 1)
        })
        .await,
        "the handed-back occurrence ran on the other node: {:?}",
        log.lock().unwrap()
    );
    let log = log.lock().unwrap().clone();
    assert_eq!(log[1].due, log[0].due);
    assert_eq!(log[1].attempt, 2);
    assert!(log[1].token > log[0].token);
    second.stop().await;
}

/// Redis restarted (kill -9, AOF with fsync always) while a group runs: no occurrence runs
/// twice, tokens never repeat.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_restart_with_aof_runs_nothing_twice() {
    let mut server = RedisServer::builder().appendonly(true).spawn();
    let url = server.url();
    let log: Log = Arc::default();
    let mut nodes = Vec::new();
    for n in 0..2 {
        // A 5 s lease: the restart is over long before it runs out, so that no claim
        // expires with it (a run whose lease ran out is retried: at least once).
        nodes.push(
            start_node_with(
                &url,
                "aof",
                n,
                every(1000),
                JobOptions::new(),
                Duration::from_millis(50),
                &log,
                Duration::from_secs(5),
            )
            .await,
        );
    }
    assert!(
        eventually(Duration::from_secs(10), || async {
            log.lock().unwrap().len() >= 3
        })
        .await
    );
    server.restart();
    let count = log.lock().unwrap().len();
    assert!(
        eventually(Duration::from_secs(20), || async {
            log.lock().unwrap().len() >= count + 3
        })
        .await,
        "runs go on after the restart"
    );
    for node in nodes {
        node.stop().await;
    }
    let log = log.lock().unwrap().clone();
    let mut dues: Vec<SystemTime> = log.iter().map(|s| s.due).collect();
    dues.sort();
    let len = dues.len();
    dues.dedup();
    assert_eq!(dues.len(), len, "an occurrence ran twice: {log:?}");
    let mut tokens: Vec<u64> = log.iter().map(|s| s.token).collect();
    tokens.sort_unstable();
    tokens.dedup();
    assert_eq!(tokens.len(), len, "a token was handed out twice: {log:?}");
}

/// Bad input is a typed error, and a key of the group holding something else is refused with
/// nothing written.
#[tokio::test]
async fn bad_jobs_and_wrong_key_types_are_typed_errors() {
    let server = RedisServer::spawn();
    let client = builder(&server).connect().await.unwrap();
    assert!(Schedule::every(Duration::from_millis(999))
        .unwrap_err()
        .is_invalid_argument());
    let err = Schedule::cron("61 * * * *").unwrap_err();
    assert!(
        err.is_invalid_argument() && err.to_string().contains("61 * * * *"),
        "{err}"
    );
    let scheduler: Scheduler = client.scheduler("bad");
    assert!(
        scheduler.run().await.unwrap_err().is_invalid_argument(),
        "no job"
    );
    let ok = |_run: Run| async { Ok::<(), String>(()) };
    scheduler.every("a", Duration::from_secs(1), ok).unwrap();
    assert!(scheduler
        .every("a", Duration::from_secs(1), ok)
        .unwrap_err()
        .is_invalid_argument());
    assert!(scheduler
        .every("", Duration::from_secs(1), ok)
        .unwrap_err()
        .is_invalid_argument());
    assert!(client
        .scheduler("")
        .every("a", Duration::from_secs(1), ok)
        .unwrap_err()
        .is_invalid_argument());
    let mut conn = server.conn().await;
    let _: () = redis::cmd("SET")
        .arg("latchkey_job:{typed}:a")
        .arg("x")
        .query_async(&mut conn)
        .await
        .unwrap();
    let typed = client.scheduler("typed");
    typed.every("a", Duration::from_secs(1), ok).unwrap();
    let err = typed.run().await.unwrap_err();
    assert!(err.is_wrong_type(), "{err}");
    let keys: Vec<String> = crate::helpers::data_keys(&mut conn).await;
    assert_eq!(
        keys,
        vec!["latchkey_job:{typed}:a".to_owned()],
        "nothing written"
    );
}

/// A job due less often than the group's keys live idle (a week) keeps its keys until it is
/// due, and a week more: a monthly job is not forgotten between its runs.
#[tokio::test]
async fn a_rare_jobs_keys_outlive_its_next_occurrence() {
    let server = RedisServer::spawn();
    let client = node_client(&server.url()).await;
    let scheduler = client.scheduler("rare");
    let year = Duration::from_secs(365 * 24 * 3600);
    scheduler
        .every("yearly", year, |_run: Run| async { Ok::<(), String>(()) })
        .unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    let running = tokio::spawn({
        let scheduler = scheduler.clone();
        async move {
            scheduler
                .run_until(async {
                    let _ = stopped.await;
                })
                .await
        }
    });
    assert!(
        eventually(Duration::from_secs(5), || async {
            scheduler
                .jobs()
                .await
                .is_ok_and(|jobs| jobs.iter().any(|j| j.next_due.is_some()))
        })
        .await
    );
    let next_due = scheduler.jobs().await.unwrap()[0].next_due.unwrap();
    let until_due = next_due
        .duration_since(SystemTime::now())
        .unwrap_or_default()
        .as_millis() as i64;
    let mut conn = server.conn().await;
    for key in ["latchkey_job:{rare}:yearly", "latchkey_jobs:{rare}"] {
        let ttl: i64 = redis::cmd("PTTL")
            .arg(key)
            .query_async(&mut conn)
            .await
            .unwrap();
        assert!(
            ttl > until_due,
            "{key} lives {ttl} ms, the job is due in {until_due} ms"
        );
    }
    let _ = stop.send(());
    running.await.unwrap().unwrap();
}

/// Two nodes with different schedules for one job (a rolling deploy): the one registered last
/// wins, and the other node runs none of its occurrences, so the job never runs on both
/// schedules.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_with_another_schedule_leaves_the_job_alone() {
    let server = RedisServer::spawn();
    let log: Log = Arc::default();
    let old = start_node(
        &server.url(),
        "deploy",
        0,
        every(1000),
        JobOptions::new(),
        Duration::from_millis(10),
        &log,
    )
    .await;
    assert!(
        eventually(Duration::from_secs(5), || async {
            !log.lock().unwrap().is_empty()
        })
        .await
    );
    let new = start_node(
        &server.url(),
        "deploy",
        1,
        every(3000),
        JobOptions::new(),
        Duration::from_millis(10),
        &log,
    )
    .await;
    // The new node has registered once one of its runs is logged; from then on only it runs.
    assert!(
        eventually(Duration::from_secs(8), || async {
            log.lock().unwrap().iter().any(|s| s.node == 1)
        })
        .await
    );
    tokio::time::sleep(Duration::from_millis(6500)).await;
    old.stop().await;
    new.stop().await;
    let log = log.lock().unwrap().clone();
    let after: Vec<&Seen> = log.iter().skip_while(|s| s.node != 1).collect();
    assert!(after.len() >= 3, "{log:?}");
    for seen in after {
        let ms = seen
            .due
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap()
            .as_millis();
        assert!(
            seen.node == 1 && ms % 3000 == 0,
            "after the new registration only the new schedule runs: {log:?}"
        );
    }
}

/// Cron schedules in a time zone: the occurrences are the zone's local times.
#[test]
fn cron_schedules_read_their_time_zone() {
    let paris = Schedule::cron("0 0 9 * * *")
        .unwrap()
        .in_time_zone(latchkey_redis::chrono_tz::Europe::Paris);
    assert_eq!(paris.to_string(), "cron 0 0 9 * * * (Europe/Paris)");
    assert_eq!(
        Schedule::every(Duration::from_secs(300))
            .unwrap()
            .to_string(),
        "every 300000 ms"
    );
}
