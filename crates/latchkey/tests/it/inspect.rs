//! `Client::inspect` and `Client::scan_names`: what operators' tools read.

use std::time::Duration;

use latchkey_redis::{Kind, RateConfig, RateType, Run, RwMode};
use latchkey_test_support::RedisServer;
use redis::AsyncCommands;

use crate::helpers::{builder, client, eventually};

/// Every kind is recognized from its layout, with its real holders, lease, token and permits.
#[tokio::test]
async fn inspect_recognizes_every_kind_with_its_state() {
    let server = RedisServer::spawn();
    let client = client(&server).await;
    assert_eq!(client.inspect("nothing").await.unwrap(), None);

    let lock = client.lock("l");
    let guard = lock.lock().await.unwrap();
    let found = client.inspect("l").await.unwrap().expect("a lock");
    assert_eq!(found.kind, Kind::Lock);
    assert_eq!(found.holders.len(), 1);
    assert_eq!(found.holders[0].owner, guard.owner_id());
    assert_eq!(found.holders[0].holds, 1);
    assert_eq!(found.fencing_token, Some(guard.fencing_token()));
    assert!(found.remaining_lease.unwrap() > Duration::ZERO);

    let rw = client.rw_lock("rw");
    let read = rw.read().lock().await.unwrap();
    let found = client.inspect("rw").await.unwrap().expect("a rw lock");
    assert_eq!(found.kind, Kind::RwLock);
    assert_eq!(found.rw_mode, Some(RwMode::Read));
    assert_eq!(found.holders[0].owner, read.owner_id());

    let semaphore = client.semaphore("s");
    assert!(semaphore.try_set_permits(3).await.unwrap());
    let permits = semaphore.acquire(2).await.unwrap();
    let found = client.inspect("s").await.unwrap().expect("a semaphore");
    assert_eq!(found.kind, Kind::Semaphore);
    assert_eq!(found.available_permits, Some(1));
    assert_eq!(found.total_permits, Some(3));

    let leased = client.permit_semaphore("p");
    assert!(leased.try_set_permits(2).await.unwrap());
    let held = leased.acquire(1).await.unwrap();
    let found = client
        .inspect("p")
        .await
        .unwrap()
        .expect("a permit semaphore");
    assert_eq!(found.kind, Kind::PermitSemaphore);
    assert_eq!(found.available_permits, Some(1));
    assert_eq!(found.leased_permits.len(), 1);
    assert_eq!(found.leased_permits[0].id, held.ids()[0]);

    let mut conn = server.conn().await;
    let _: () = conn.rpush("a-list", "x").await.unwrap();
    let err = client.inspect("a-list").await.unwrap_err();
    assert!(err.is_wrong_type(), "{err:?}");
    drop((guard, read, permits, held));
}

/// A fair lock with a waiter in line shows as a fair lock, with the waiter's owner id (another
/// acquire through a clone of the holder's handle: an owner of its own, of the same client).
#[tokio::test]
async fn inspect_shows_a_fair_locks_queue() {
    let server = RedisServer::spawn();
    let client = client(&server).await;
    let fair = client.fair_lock("f");
    let guard = fair.lock().await.unwrap();
    let waiter = fair.clone();
    let waiting = tokio::spawn(async move { waiter.lock().await.map(drop) });
    let mut found = None;
    for _ in 0..100 {
        let now = client.inspect("f").await.unwrap().unwrap();
        if now.kind == Kind::FairLock {
            found = Some(now);
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let found = found.expect("the waiter gets in line");
    assert_eq!(found.fair_queue.len(), 1, "{:?}", found.fair_queue);
    let owner = &found.fair_queue[0];
    assert_eq!(owner.rsplit_once(':').unwrap().0, client.id());
    assert_ne!(owner, guard.owner_id(), "the waiter is an owner of its own");
    assert_eq!(found.holders[0].owner, guard.owner_id());
    guard.unlock().await.unwrap();
    waiting.await.unwrap().unwrap();
}

/// `scan_names` lists objects, not the keys derived from them, and keeps to the namespace.
#[tokio::test]
async fn scan_names_lists_objects_once_and_keeps_to_the_namespace() {
    let server = RedisServer::spawn();
    let plain = client(&server).await;
    let billing = builder(&server)
        .namespace("billing")
        .connect()
        .await
        .unwrap();
    let lock = billing.lock("job:1");
    let _guard = lock.lock().await.unwrap();
    let rw = billing.rw_lock("job:2");
    let _read = rw.read().lock().await.unwrap();
    let permits = billing.permit_semaphore("job:3");
    assert!(permits.try_set_permits(1).await.unwrap());
    let _leased = permits.acquire(1).await.unwrap();
    let _other = plain.lock("job:9").lock().await.unwrap();

    assert_eq!(
        billing.scan_names("*").await.unwrap(),
        vec!["job:1", "job:2", "job:3"],
        "the fencing counter, read lease and permit leases are not names"
    );
    assert_eq!(
        billing.scan_names("job:[12]").await.unwrap(),
        vec!["job:1", "job:2"]
    );
    assert_eq!(
        plain.scan_names("job:*").await.unwrap(),
        vec!["job:9"],
        "another namespace's objects are not found without it"
    );
}

/// A rate limiter is recognized by its config hash, with its rate and, for an overall limiter,
/// the permits its window has left; a per-client limiter's windows are each client's own. Its
/// windows' keys are not names. A hash that looks like a config but is not one, and a window of
/// another type, are refused as the wrong type, and nothing is changed.
#[tokio::test]
async fn inspect_recognizes_a_rate_limiter() {
    let server = RedisServer::spawn();
    let client = client(&server).await;
    let config = RateConfig::new(RateType::Overall, 10, Duration::from_secs(60))
        .with_keep_alive(Duration::from_secs(3600));
    let geocoder = client.rate_limiter("geocoder");
    assert!(geocoder.try_set_rate_with(config).await.unwrap());
    geocoder.acquire(3).await.unwrap();
    let found = client
        .inspect("geocoder")
        .await
        .unwrap()
        .expect("a limiter");
    assert_eq!(found.kind, Kind::RateLimiter);
    assert_eq!(found.rate, Some(config));
    assert_eq!(found.available_permits, Some(7));
    assert!(
        found.holders.is_empty(),
        "the config's fields are not holders"
    );

    let exports = client.rate_limiter("exports");
    let per_client = RateConfig::new(RateType::PerClient, 5, Duration::from_millis(1500));
    assert!(exports.try_set_rate_with(per_client).await.unwrap());
    exports.acquire(1).await.unwrap();
    let found = client.inspect("exports").await.unwrap().expect("a limiter");
    assert_eq!(found.kind, Kind::RateLimiter);
    assert_eq!(found.rate, Some(per_client));
    assert_eq!(found.available_permits, None, "one window per client");

    assert_eq!(
        client.scan_names("*").await.unwrap(),
        vec!["exports", "geocoder"],
        "the windows (counters and logs, overall and per client) are not names"
    );

    let mut conn = server.conn().await;
    let _: () = redis::cmd("HSET")
        .arg("fake")
        .arg(&["rate", "many", "interval", "1000", "type", "0"])
        .query_async(&mut conn)
        .await
        .unwrap();
    let err = client.inspect("fake").await.unwrap_err();
    assert!(err.is_wrong_type(), "{err:?}");

    let broken = client.rate_limiter("broken");
    assert!(broken
        .try_set_rate(RateType::Overall, 2, Duration::from_secs(60))
        .await
        .unwrap());
    let _: () = conn.rpush("{broken}:value", "x").await.unwrap();
    let err = client.inspect("broken").await.unwrap_err();
    assert!(err.is_wrong_type(), "{err:?}");
    assert_eq!(
        broken.rate().await.unwrap().map(|c| c.rate),
        Some(2),
        "reads only"
    );
}

/// A scheduler group keeps nothing under its own name: `inspect` recognizes it by its index,
/// with its number of jobs, and `scan_names` lists it, within the namespace and the pattern. An
/// index of another type is not a group.
#[tokio::test]
async fn inspect_and_scan_names_find_a_job_group() {
    let server = RedisServer::spawn();
    let billing = builder(&server)
        .namespace("billing")
        .connect()
        .await
        .unwrap();
    let scheduler = billing.scheduler("nightly");
    for job in ["sweep", "report"] {
        scheduler
            .every(job, Duration::from_secs(3600), |_: Run| async {
                Ok::<(), String>(())
            })
            .unwrap();
    }
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let node = scheduler.clone();
    let running = tokio::spawn(async move {
        node.run_until(async {
            let _ = stopped.await;
        })
        .await
    });
    assert!(
        eventually(Duration::from_secs(10), || async {
            billing.inspect("nightly").await.unwrap().is_some()
        })
        .await,
        "the jobs are registered"
    );
    let found = billing.inspect("nightly").await.unwrap().unwrap();
    assert_eq!(found.kind, Kind::JobGroup);
    assert_eq!(found.jobs, Some(2));
    assert_eq!(billing.scan_names("*").await.unwrap(), vec!["nightly"]);
    assert_eq!(
        billing.scan_names("night[a-z]*").await.unwrap(),
        vec!["nightly"]
    );
    assert!(billing.scan_names("day*").await.unwrap().is_empty());
    let plain = client(&server).await;
    assert_eq!(plain.inspect("nightly").await.unwrap(), None);
    assert_eq!(
        plain.scan_names("billing:*").await.unwrap(),
        vec!["billing:nightly"]
    );

    let mut conn = server.conn().await;
    let _: () = conn.set("latchkey_jobs:{odd}", "x").await.unwrap();
    // Listed by `scan_names`, as any key is; `inspect` tells it apart.
    assert_eq!(plain.inspect("odd").await.unwrap(), None);

    stop.send(()).unwrap();
    running.await.unwrap().unwrap();
}

/// Every client registers what it is (host, process id, program, library version, name) under
/// one key, from its first grant on and kept alive by its watchdog while it holds anything; the
/// registration lapses a watchdog timeout after its last hold, and the next grant makes it again
/// at once. An owner that registered nothing (a Redisson client) is unknown.
#[tokio::test]
async fn a_holders_client_is_known_while_it_holds() {
    let server = RedisServer::spawn();
    let watchdog = Duration::from_secs(1);
    let holder = builder(&server)
        .client_name("worker-7")
        .watchdog_timeout(watchdog)
        .connect()
        .await
        .unwrap();
    let observer = client(&server).await;
    assert_eq!(observer.client_info(holder.id()).await.unwrap(), None);

    let guard = holder.lock("job").lock().await.unwrap();
    let owner = guard.owner_id().to_owned();
    // Made at the grant, not at the watchdog's next tick (a third of the timeout away).
    assert!(
        eventually(Duration::from_millis(250), || async {
            observer.client_info(&owner).await.unwrap().is_some()
        })
        .await,
        "registered at the first grant"
    );
    let info = observer.client_info(&owner).await.unwrap().unwrap();
    assert_eq!(info.id, holder.id());
    assert_eq!(info.name.as_deref(), Some("worker-7"));
    assert_eq!(info.pid, std::process::id());
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    assert_eq!(info.host, host.trim());
    let exe = std::env::current_exe().unwrap();
    assert_eq!(info.program, exe.file_name().unwrap().to_string_lossy());
    assert_eq!(
        info.version,
        format!("latchkey-redis {}", env!("CARGO_PKG_VERSION"))
    );
    assert_eq!(
        info.to_string(),
        format!(
            "worker-7 ({}, pid {} on {}, {})",
            info.program, info.pid, info.host, info.version
        )
    );
    // The bare client id finds it too; the key expires by itself.
    assert_eq!(observer.client_info(holder.id()).await.unwrap(), Some(info));
    let key = format!("latchkey_client:{{{}}}", holder.id());
    let pttl: i64 = crate::helpers::read(&server, &["PTTL", &key]);
    assert!(pttl > 0 && pttl <= 1000, "{pttl}");

    // Kept alive for as long as the hold lasts.
    tokio::time::sleep(watchdog * 3).await;
    assert!(observer.client_info(&owner).await.unwrap().is_some());

    // Idle: it lapses; the next grant registers again at once.
    guard.unlock().await.unwrap();
    assert!(
        eventually(watchdog * 4, || async {
            observer.client_info(&owner).await.unwrap().is_none()
        })
        .await,
        "the registration lapses once the client holds nothing"
    );
    let again = holder.lock("job").lock().await.unwrap();
    assert!(
        eventually(Duration::from_millis(250), || async {
            observer
                .client_info(again.owner_id())
                .await
                .unwrap()
                .is_some()
        })
        .await,
        "registered again at the next grant"
    );
    again.unlock().await.unwrap();

    // A Redisson owner (`<uuid>:<thread id>`) registered nothing.
    assert_eq!(
        observer
            .client_info("6f1c64d4-6a8b-4f8e-9d4e-2c1a9b7e5f00:57")
            .await
            .unwrap(),
        None
    );
}
