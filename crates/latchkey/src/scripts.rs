//! The Lua scripts, kept as files in `scripts/` and sent with EVALSHA.

use std::sync::LazyLock;

use redis::Script;

macro_rules! script {
    ($(#[$doc:meta])* $name:ident = $file:literal) => {
        $(#[$doc])*
        pub(crate) static $name: LazyLock<Script> =
            LazyLock::new(|| Script::new(include_str!(concat!("../scripts/", $file))));
    };
}

script!(
    /// Acquire or re-enter a reentrant lock.
    LOCK_ACQUIRE = "lock_acquire.lua"
);
script!(
    /// Release one hold of a reentrant lock.
    LOCK_RELEASE = "lock_release.lua"
);
script!(
    /// Renew or check a batch of held locks.
    LOCK_RENEW = "lock_renew.lua"
);
script!(
    /// Unregister a client whose last waiter gave up, passing on a hand-off meant for it.
    LOCK_LEAVE = "lock_leave.lua"
);
script!(
    /// Read a lock's state in one snapshot.
    LOCK_STATUS = "lock_status.lua"
);
script!(
    /// Delete a lock whoever holds it.
    LOCK_FORCE_UNLOCK = "lock_force_unlock.lua"
);

/// Redisson's unlock message (`LockPubSub.UNLOCK_MESSAGE`).
pub(crate) const UNLOCK_MESSAGE: &str = "0";
/// Redisson's read-unlock message (`LockPubSub.READ_UNLOCK_MESSAGE`): wake every waiter.
pub(crate) const READ_UNLOCK_MESSAGE: &str = "1";
