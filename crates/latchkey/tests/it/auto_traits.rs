//! The futures of the public async API are `Send` and `Sync`, as tokio's are: they can be
//! spawned, and held across an `.await` in a future that must be `Sync` itself. Checked at
//! compile time; the test only names them.

use latchkey::{Client, RedLock};

fn send_and_sync<T: Send + Sync>(_: &T) {}

/// Never run: type-checks each future (a regression is a compile error of this test binary).
#[allow(dead_code, unused_must_use)]
async fn futures(client: Client, redlock: RedLock) {
    let lock = client.lock("x");
    let acquire = lock.lock();
    send_and_sync(&acquire);
    let guard = acquire.await.unwrap();
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
}
