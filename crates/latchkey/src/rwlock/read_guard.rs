//! The guard of a read hold of a read-write lock.

use crate::guard::lock_guard;

use super::{ReadLock, RwLock};

lock_guard!(
    /// A read hold of a [`RwLock`]. Releasing it (explicitly with [`ReadGuard::unlock`], or by
    /// dropping it and every guard [re-entered](ReadGuard::reenter) from it) gives the hold back;
    /// once no hold is left, waiting writers are woken.
    ///
    /// The guard owns what it needs (`'static`, `Send`, `Sync`), so it can move into a spawned task.
    /// Dropping it never blocks: the release is handed to the client's background task.
    #[must_use = "dropping the guard releases the read hold at once"]
    ReadGuard(ReadLock),
    "client.rw_lock(\"config\").read().lock()"
);

impl ReadGuard {
    /// The read-write lock this guard holds.
    pub fn rw_lock(&self) -> &RwLock {
        self.core.held().rw_lock()
    }
}
