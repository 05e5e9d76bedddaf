//! The guard of one write hold of a read-write lock.

use crate::guard::{lock_guard, GuardCore};

use super::{RwLock, WriteLock};

/// One write hold of a [`RwLock`]. Releasing it (explicitly with [`WriteGuard::unlock`], or by
/// dropping it) gives the hold back; once every write hold is given back, every waiter is woken
/// (and the lock stays in read mode if the holder also took read holds).
///
/// The guard owns what it needs (`'static`, `Send`, `Sync`), so it can move into a spawned task.
/// Dropping it never blocks: the release is handed to the client's background task.
#[must_use = "dropping the guard releases the write hold at once"]
pub struct WriteGuard {
    pub(super) core: GuardCore<WriteLock>,
}

lock_guard!(WriteGuard, "client.rw_lock(\"config\").write().lock()");

impl WriteGuard {
    /// The read-write lock this guard holds.
    pub fn rw_lock(&self) -> &RwLock {
        self.core.held().rw_lock()
    }
}
