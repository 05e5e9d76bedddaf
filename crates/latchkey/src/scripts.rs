//! The Lua scripts, kept as files in `scripts/` and sent with EVALSHA.

use std::sync::LazyLock;

use redis::Script;

/// The source of the script `$file` of `scripts/`, after the prelude (`scripts/prelude.lua`: the
/// helpers every script may use). A command Redis refuses is reported on a line of this text.
macro_rules! lua {
    ($file:literal) => {
        concat!(
            include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/prelude.lua")),
            include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/", $file))
        )
    };
}
pub(crate) use lua;

macro_rules! script {
    ($(#[$doc:meta])* $name:ident = $file:literal) => {
        $(#[$doc])*
        pub(crate) static $name: LazyLock<Script> =
            LazyLock::new(|| Script::new(lua!($file)));
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
    /// Release a lock's last hold again on a new primary after a failover, if it is still the
    /// latest grant.
    LOCK_RELEASE_RESEND = "lock_release_resend.lua"
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
