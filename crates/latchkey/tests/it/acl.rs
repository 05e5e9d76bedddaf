//! ACL users: every primitive runs under the README's minimal ACL lines, on a single server, a
//! Sentinel group and a cluster; and each permission of the single-server line, removed in
//! turn, makes an operation fail with `Error::PermissionDenied` naming it, with nothing changed.
//!
//! The ACL lines are read from README.md's `### ACL` section, so the documentation and these
//! tests cannot drift apart.

use std::time::Duration;

use latchkey_redis::{Client, Error, MultiLock, Refused, ReplicaSync};
use latchkey_test_support::{RedisCluster, RedisServer, SentinelGroup};
use redis::aio::MultiplexedConnection;

use crate::helpers::{holds_for, keyspace, Keyspace};

/// Permissions of the README's lines that the operations here do not reach: `unsubscribe`
/// (`sunsubscribe`) runs in the background after a channel's linger, `lpush` in `nack`.
const UNEXERCISED: &[&str] = &["+unsubscribe", "+sunsubscribe", "+lpush"];

/// An ACL line of the README: `user <name> <rules…>`.
struct AclLine {
    user: String,
    password: String,
    rules: Vec<String>,
}

impl AclLine {
    fn parse(line: &str) -> AclLine {
        let mut tokens = line.split_whitespace();
        assert_eq!(tokens.next(), Some("user"), "an ACL line: {line}");
        let user = tokens.next().expect("a user name").to_owned();
        let rules: Vec<String> = tokens.map(str::to_owned).collect();
        let password = rules
            .iter()
            .find_map(|rule| rule.strip_prefix('>'))
            .expect("a password (`>…`)")
            .to_owned();
        AclLine {
            user,
            password,
            rules,
        }
    }

    /// The permissions a rule grants: commands (`+…`), key (`~…`) and channel (`&…`) patterns.
    fn permissions(&self) -> Vec<String> {
        self.rules
            .iter()
            .filter(|rule| rule.starts_with(['+', '~', '&']))
            .cloned()
            .collect()
    }

    /// Makes this user on `server` (replacing whatever it had) with `rules` instead of its own.
    fn apply(&self, server: &RedisServer, rules: &[String]) {
        let mut args = vec!["ACL", "SETUSER", self.user.as_str(), "reset"];
        args.extend(rules.iter().map(String::as_str));
        server.cmd_sync(&args);
    }

    /// `redis://user:password@` + `hosts`.
    fn url(&self, scheme: &str, hosts: &str) -> String {
        format!("{scheme}://{}:{}@{hosts}", self.user, self.password)
    }
}

/// The ACL lines of the README's `### ACL` section: single server, Sentinel's data nodes,
/// cluster.
fn readme_acl() -> [AclLine; 3] {
    let readme = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md"));
    let (_, section) = readme
        .split_once("\n### ACL\n")
        .expect("an `### ACL` section");
    let section = section.split("\n## ").next().unwrap();
    let lines: Vec<&str> = section
        .lines()
        .filter(|line| line.starts_with("user "))
        .collect();
    assert_eq!(
        lines.len(),
        3,
        "a line for a single server, Sentinel's data nodes and a cluster: {lines:?}"
    );
    [lines[0], lines[1], lines[2]].map(AclLine::parse)
}

/// Every key with its type and value (not its TTL, which renewals move).
async fn snapshot(admin: &mut Option<MultiplexedConnection>) -> Keyspace {
    let Some(conn) = admin.as_mut() else {
        return Keyspace::new();
    };
    let mut keys = keyspace(conn).await;
    // A key that expired between KEYS and DUMP is gone.
    keys.retain(|_, (_, dump)| dump.is_some());
    keys
}

/// The operation that failed, its error (`None`: a held lock was lost, its renewal refused),
/// and whether Redis changed during it.
#[derive(Debug)]
struct Failure {
    step: &'static str,
    error: Option<Error>,
    changed: bool,
}

impl Failure {
    fn describe(&self) -> String {
        match &self.error {
            Some(error) => format!("{}: {}", self.step, error.chain()),
            None => format!("{}: the lock was lost", self.step),
        }
    }
}

/// Whether the keyspace differs from `before`, once the clean-up that a failed operation leaves
/// to the background (a waiter that gave up leaves its wait queue) had time to run: whether it
/// stays different for 2 s.
async fn changed_from(admin: &Option<MultiplexedConnection>, before: &Keyspace) -> bool {
    holds_for(Duration::from_secs(2), || {
        let mut admin = admin.clone();
        async move { snapshot(&mut admin).await != *before }
    })
    .await
}

/// Runs `$op`; on an error, returns a [`Failure`] saying whether the keyspace changed.
macro_rules! step {
    ($admin:expr, $name:expr, $op:expr) => {{
        let before = snapshot($admin).await;
        match $op.await {
            Ok(value) => value,
            Err(error) => {
                let changed = changed_from($admin, &before).await;
                return Err(Failure {
                    step: $name,
                    error: Some(error),
                    changed,
                });
            }
        }
    }};
}

/// The clients of these tests: every setting an ACL'd deployment would use (replica sync
/// `Auto` runs `WAIT`/`ROLE` under the ACL too), no test-suite shortcut.
fn acl_builder(url: &str) -> latchkey_redis::ClientBuilder {
    Client::builder(url)
        .watchdog_timeout(Duration::from_millis(1500))
        .connect_timeout(Duration::from_secs(5))
        .command_timeout(Duration::from_secs(5))
        .replica_sync(ReplicaSync::Auto)
}

const SHORT: Duration = Duration::from_millis(200);
const LONG: Duration = Duration::from_secs(20);

/// The main operations of every primitive, by two clients of `url`, with names under `run`.
/// With `admin`, a failed operation is checked for changes to the keyspace.
async fn exercise(
    url: &str,
    run: &str,
    mut admin: Option<MultiplexedConnection>,
) -> Result<(), Failure> {
    let admin = &mut admin;
    let a = step!(admin, "Client::connect", acl_builder(url).connect());
    let b = step!(admin, "Client::connect", acl_builder(url).connect());
    let name = |what: &str| format!("{run}:{what}");

    // Lock: hold past two renewals, a waiter that gives up, status, a wake-up by unlock.
    let lock = a.lock(name("lock"));
    let guard = step!(admin, "Lock::lock", lock.lock());
    tokio::time::sleep(Duration::from_millis(1100)).await;
    if guard.is_lost() {
        return Err(Failure {
            step: "watchdog renewal",
            error: None,
            changed: false,
        });
    }
    let other = b.lock(name("lock"));
    let none = step!(admin, "Lock::try_lock (held)", other.try_lock(SHORT));
    assert!(none.is_none());
    // A waiter that gave up leaves its wait queue in the background: let it finish.
    tokio::time::sleep(SHORT).await;
    let status = step!(admin, "Lock::status", lock.status());
    assert_eq!(status.holders.len(), 1);
    let waiter = tokio::spawn(async move { other.lock().await });
    tokio::time::sleep(SHORT).await;
    step!(admin, "LockGuard::unlock", guard.unlock());
    let woken = tokio::time::timeout(LONG, waiter).await.unwrap().unwrap();
    let woken = step!(admin, "Lock::lock (woken)", async { woken });
    step!(admin, "LockGuard::unlock", woken.unlock());
    step!(admin, "Lock::force_unlock", lock.force_unlock());

    // Fair lock.
    let fair = a.fair_lock(name("fair"));
    let guard = step!(admin, "FairLock::lock", fair.lock());
    let other = b.fair_lock(name("fair"));
    let none = step!(admin, "FairLock::try_lock (held)", other.try_lock(SHORT));
    assert!(none.is_none());
    // A waiter that gave up leaves its wait queue in the background: let it finish.
    tokio::time::sleep(SHORT).await;
    let waiter = tokio::spawn(async move { other.lock().await });
    tokio::time::sleep(SHORT).await;
    step!(admin, "FairLockGuard::unlock", guard.unlock());
    let woken = tokio::time::timeout(LONG, waiter).await.unwrap().unwrap();
    let woken = step!(admin, "FairLock::lock (woken)", async { woken });
    let queue = step!(admin, "FairLock::queue", fair.queue());
    assert!(queue.is_empty(), "{queue:?}");
    step!(admin, "FairLockGuard::unlock", woken.unlock());

    // Read-write lock.
    let rw = a.rw_lock(name("rw"));
    let read = step!(admin, "ReadLock::lock", rw.read().lock());
    let other = b.rw_lock(name("rw"));
    let read2 = step!(admin, "ReadLock::lock (second reader)", other.read().lock());
    let writer = b.rw_lock(name("rw")).write();
    let none = step!(
        admin,
        "WriteLock::try_lock (read held)",
        writer.try_lock(SHORT)
    );
    assert!(none.is_none());
    // A waiter that gave up leaves its wait queue in the background: let it finish.
    tokio::time::sleep(SHORT).await;
    step!(admin, "ReadGuard::unlock", read.unlock());
    step!(admin, "ReadGuard::unlock", read2.unlock());
    let write = step!(admin, "WriteLock::lock", rw.write().lock());
    step!(admin, "WriteGuard::unlock", write.unlock());

    // Semaphore.
    let semaphore = a.semaphore(name("sem"));
    assert!(step!(
        admin,
        "Semaphore::try_set_permits",
        semaphore.try_set_permits(1)
    ));
    let permits = step!(admin, "Semaphore::acquire", semaphore.acquire(1));
    let other = b.semaphore(name("sem"));
    let none = step!(
        admin,
        "Semaphore::try_acquire (none left)",
        other.try_acquire(1, SHORT)
    );
    assert!(none.is_none());
    // A waiter that gave up leaves its wait queue in the background: let it finish.
    tokio::time::sleep(SHORT).await;
    step!(admin, "Permits::release", permits.release());
    assert_eq!(
        step!(
            admin,
            "Semaphore::available_permits",
            semaphore.available_permits()
        ),
        1
    );

    // Semaphore with leased permits.
    let semaphore = a.permit_semaphore(name("psem"));
    assert!(step!(
        admin,
        "PermitSemaphore::try_set_permits",
        semaphore.try_set_permits(1)
    ));
    let permits = step!(admin, "PermitSemaphore::acquire", semaphore.acquire(1));
    let other = b.permit_semaphore(name("psem"));
    let none = step!(
        admin,
        "PermitSemaphore::try_acquire (none left)",
        other.try_acquire(1, SHORT)
    );
    assert!(none.is_none());
    // A waiter that gave up leaves its wait queue in the background: let it finish.
    tokio::time::sleep(SHORT).await;
    step!(admin, "LeasedPermits::release", permits.release());
    assert_eq!(
        step!(
            admin,
            "PermitSemaphore::available_permits",
            semaphore.available_permits()
        ),
        1
    );

    // Count-down latch.
    let latch = a.count_down_latch(name("latch"));
    assert!(step!(
        admin,
        "CountDownLatch::try_set_count",
        latch.try_set_count(1)
    ));
    let other = b.count_down_latch(name("latch"));
    let open = step!(
        admin,
        "CountDownLatch::wait_for (closed)",
        other.wait_for(SHORT)
    );
    assert!(!open);
    // A waiter that gave up leaves its wait queue in the background: let it finish.
    tokio::time::sleep(SHORT).await;
    step!(admin, "CountDownLatch::count_down", latch.count_down());
    assert!(step!(
        admin,
        "CountDownLatch::wait_for (open)",
        other.wait_for(LONG)
    ));

    // Multi-lock.
    let multi = MultiLock::new([a.lock(name("m1")), a.lock(name("m2"))]).unwrap();
    let guard = step!(admin, "MultiLock::lock", multi.lock());
    step!(admin, "MultiLockGuard::unlock", guard.unlock());

    // Delayed queue feeding a blocking queue, and the blocking queue alone.
    let delayed = a.delayed_queue::<String>(name("queue"));
    let item = "hello".to_owned();
    step!(admin, "DelayedQueue::offer", delayed.offer(&item, SHORT));
    assert_eq!(step!(admin, "DelayedQueue::len", delayed.len()), 1);
    let inbox = b.blocking_queue::<String>(name("queue"));
    let delivery = step!(admin, "BlockingQueue::poll", inbox.poll(LONG));
    let delivery = delivery.expect("the delayed item arrives");
    assert_eq!(delivery.item(), &item);
    assert!(step!(admin, "Delivery::ack", delivery.ack()).is_acked());
    let queue = a.blocking_queue::<String>(name("queue"));
    step!(admin, "BlockingQueue::put", queue.put(&item));
    assert_eq!(
        step!(
            admin,
            "BlockingQueue::take_at_most_once",
            inbox.take_at_most_once()
        ),
        item
    );
    // An item its consumer cannot decode goes to the dead letters, which an operator reads.
    step!(admin, "BlockingQueue::put", queue.put(&item));
    let numbers = b.blocking_queue::<u64>(name("queue"));
    let none = step!(admin, "BlockingQueue::poll", numbers.poll(SHORT));
    assert!(none.is_none(), "the undecodable item is not delivered");
    let dead = step!(
        admin,
        "BlockingQueue::dead_letters",
        numbers.dead_letters(10)
    );
    assert_eq!(dead.len(), 1);
    Ok(())
}

/// Whether `error` is the refusal of `permission` (`+command`, `~keys`, `&channels`), by name.
fn names(permission: &str, error: &Error) -> bool {
    let text = error.to_string();
    error.is_auth()
        && match (error, permission.as_bytes()[0]) {
            (
                Error::PermissionDenied {
                    refused: Refused::Command(Some(command)),
                    ..
                },
                b'+',
            ) => permission[1..] == *command && text.contains(&format!("grant `{permission}`")),
            (
                Error::PermissionDenied {
                    refused: Refused::KeyOf(_),
                    ..
                },
                b'~',
            ) => text.contains("key pattern (`~`)"),
            (
                Error::PermissionDenied {
                    refused: Refused::ChannelOf(_) | Refused::Channel(_),
                    ..
                },
                b'&',
            ) => text.contains("channel pattern (`&`)"),
            _ => false,
        }
}

/// Every primitive works under the README's line on a single server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readme_acl_serves_every_primitive_on_a_single_server() {
    let [single, _, _] = readme_acl();
    let server = RedisServer::spawn();
    single.apply(&server, &single.rules);
    let url = single.url("redis", &server.addr());
    if let Err(failure) = exercise(&url, "single", None).await {
        panic!("{}", failure.describe());
    }
}

/// Every primitive works under the README's line on the data nodes behind Sentinel (the
/// sentinels themselves without a password).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readme_acl_serves_every_primitive_behind_sentinel() {
    let [_, single, _] = readme_acl();
    let group = SentinelGroup::spawn(1, 1);
    for server in group.servers() {
        single.apply(server, &single.rules);
    }
    let url = group
        .url()
        .replacen("redis+sentinel://", &single.url("redis+sentinel", ""), 1);
    if let Err(failure) = exercise(&url, "sentinel", None).await {
        panic!("{}", failure.describe());
    }
}

/// Every primitive works under the README's cluster line on a cluster.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readme_acl_serves_every_primitive_on_a_cluster() {
    let [single, _, line] = readme_acl();
    let cluster = RedisCluster::spawn(3, 0);
    for node in cluster.nodes() {
        line.apply(node, &line.rules);
    }
    let hosts: Vec<String> = cluster.primaries().iter().map(|n| n.addr()).collect();
    let url = line.url("redis+cluster", &hosts.join(","));
    if let Err(failure) = exercise(&url, "cluster", None).await {
        panic!("{}", failure.describe());
    }
    // What the cluster needs beyond a single server, removed in turn.
    let extra: Vec<String> = line
        .permissions()
        .into_iter()
        .filter(|p| !single.permissions().contains(p))
        .collect();
    assert!(extra.contains(&"+cluster|slots".to_owned()), "{extra:?}");
    let mut problems = Vec::new();
    for (i, permission) in extra.iter().enumerate() {
        let rules: Vec<String> = line
            .rules
            .iter()
            .filter(|r| *r != permission)
            .cloned()
            .collect();
        for node in cluster.nodes() {
            line.apply(node, &rules);
        }
        match exercise(&url, &format!("without{i}"), None).await {
            Ok(()) if UNEXERCISED.contains(&permission.as_str()) => {}
            Ok(()) => problems.push(format!("{permission}: not needed")),
            Err(failure) => {
                eprintln!("without {permission}: {}", failure.describe());
                if !failure.error.as_ref().is_some_and(|e| names(permission, e)) {
                    problems.push(format!("{permission}: {}", failure.describe()));
                }
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// Each permission of the single-server line, removed in turn: an operation fails with
/// `PermissionDenied` naming what is missing, and Redis is unchanged by it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_permission_removed_in_turn_is_refused_by_name_and_changes_nothing() {
    let [single, _, _] = readme_acl();
    let server = RedisServer::spawn();
    let url = single.url("redis", &server.addr());
    let mut problems = Vec::new();
    for (i, permission) in single.permissions().into_iter().enumerate() {
        server.cmd_sync(&["FLUSHALL"]);
        // A cold script cache, as on a fresh server: the scripts are loaded again.
        server.cmd_sync(&["SCRIPT", "FLUSH"]);
        let rules: Vec<String> = single
            .rules
            .iter()
            .filter(|rule| **rule != permission)
            .cloned()
            .collect();
        single.apply(&server, &rules);
        let admin = Some(server.conn().await);
        let Err(failure) = exercise(&url, &format!("without{i}"), admin).await else {
            if !UNEXERCISED.contains(&permission.as_str()) {
                problems.push(format!(
                    "{permission}: not needed, every operation succeeded"
                ));
            }
            continue;
        };
        let clean = !failure.changed
            && failure
                .error
                .as_ref()
                .is_some_and(|e| names(&permission, e));
        if !clean {
            problems.push(format!("{permission}: {}", failure.describe()));
        }
        eprintln!("without {permission}: {}", failure.describe());
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
