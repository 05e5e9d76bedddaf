//! The futures of the public async API are `Send` and `Sync`, as tokio's are: they can be
//! spawned, and held across an `.await` in a future that must be `Sync` itself. Checked at
//! compile time; the test only names them. The [`Guard`] trait is usable as `&dyn Guard`, and
//! its `lost()` future is `Send + Sync` too.

use std::time::Duration;

use latchkey_redis::{Client, FencingToken, Guard, Lost, MultiLock, RedLock};
use latchkey_test_support::RedisServer;

use crate::helpers::client;

fn send_and_sync<T: Send + Sync>(_: &T) {}

/// Never run: type-checks each future (a regression is a compile error of this test binary).
#[allow(dead_code, unused_must_use)]
async fn futures(client: Client, redlock: RedLock) {
    let lock = client.lock("x");
    let acquire = lock.lock();
    send_and_sync(&acquire);
    let guard = acquire.await.unwrap();
    send_and_sync(&guard.lost());
    let unlock = guard.unlock();
    send_and_sync(&unlock);
    let semaphore = client.semaphore("s");
    send_and_sync(&semaphore.acquire(1));
    let permits = client.permit_semaphore("p");
    send_and_sync(&permits.acquire(1));
    send_and_sync(&redlock.lock());
    send_and_sync(&client.election("e").campaign("v"));
    send_and_sync(&client.count_down_latch("l").wait());
}

#[test]
fn public_futures_are_send_and_sync() {
    // The check is `futures` compiling; this names it so that it is not dead code.
    let _ = futures;
    fn check<T: Send + Sync + 'static>() {}
    check::<Lost>();
    check::<FencingToken>();
    check::<Box<dyn Guard>>();
}

/// What generic code sees of a hold, through `&dyn Guard`.
async fn through_dyn(guard: &dyn Guard) -> (String, Option<FencingToken>, bool, bool) {
    let lost: Lost = guard.lost();
    send_and_sync(&lost);
    // Not lost: the future does not resolve.
    let fired = tokio::time::timeout(Duration::from_millis(50), lost)
        .await
        .is_ok();
    (
        guard.name().to_owned(),
        guard.fencing_token(),
        guard.is_lost(),
        fired,
    )
}

#[tokio::test]
async fn guards_work_as_dyn_guard() {
    let server = RedisServer::spawn();
    let client = client(&server).await;

    let guard = client.lock("dyn-lock").lock().await.unwrap();
    let (name, token, is_lost, fired) = through_dyn(&guard).await;
    assert_eq!(name, "dyn-lock");
    assert_eq!(token, Some(guard.fencing_token()));
    assert!(!is_lost && !fired);
    Guard::unlock(guard).await.unwrap();

    let multi = MultiLock::new([client.lock("dyn-a"), client.lock("dyn-b")]).unwrap();
    let guard = multi.lock().await.unwrap();
    let (name, token, is_lost, fired) = through_dyn(&guard).await;
    assert_eq!(name, "dyn-a, dyn-b");
    assert_eq!(token, None, "several locks have no one token");
    assert!(!is_lost && !fired);
    // Lost through the trait once the hold is gone.
    let lost = (&guard as &dyn Guard).lost();
    assert!(client.lock("dyn-b").force_unlock().await.unwrap());
    tokio::time::timeout(Duration::from_secs(10), lost)
        .await
        .expect("lost() fires through &dyn Guard");
    assert!((&guard as &dyn Guard).is_lost());
    assert!(Guard::unlock(guard).await.unwrap_err().is_not_owner());
}
