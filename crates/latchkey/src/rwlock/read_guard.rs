//! The guard of one read hold of a read-write lock.

use std::sync::atomic::Ordering;

use crate::guard::{lock_guard, GuardCore};

use super::{ReadLock, RwLock};

/// One read hold of a [`RwLock`]. Releasing it (explicitly with [`ReadGuard::unlock`], or by
/// dropping it) gives the hold back; once no hold is left, waiting writers are woken.
///
/// The guard owns what it needs (`'static`, `Send`, `Sync`), so it can move into a spawned task.
/// Dropping it never blocks: the release is handed to the client's background task.
#[must_use = "dropping the guard releases the read hold at once"]
pub struct ReadGuard {
    core: GuardCore<ReadLock>,
    /// Set once the guard reaches its caller: a guard granted to a caller that went away (and
    /// dropped at once where it landed) must not make a write of the same owner look like an
    /// upgrade.
    counted: Option<Counted>,
}

lock_guard!(ReadGuard, "client.rw_lock(\"config\").read().lock()");

impl ReadGuard {
    pub(super) fn new(core: GuardCore<ReadLock>) -> ReadGuard {
        ReadGuard {
            core,
            counted: None,
        }
    }

    /// The guard has reached its caller: count it among the owner's live read guards.
    pub(super) fn delivered(mut self) -> ReadGuard {
        let rw = self.core.held().rw_lock().clone();
        rw.inner.read_guards.fetch_add(1, Ordering::AcqRel);
        self.counted = Some(Counted(rw));
        self
    }

    /// The read-write lock this guard holds.
    pub fn rw_lock(&self) -> &RwLock {
        self.core.held().rw_lock()
    }
}

/// Counts a live read guard in its lock's `read_guards` (a write of the same owner is refused as
/// an upgrade while one lives).
struct Counted(RwLock);

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.inner.read_guards.fetch_sub(1, Ordering::AcqRel);
    }
}
