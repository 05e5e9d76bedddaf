//! The guard of one read hold of a read-write lock.

use std::fmt;
use std::future::Future;
use std::sync::atomic::Ordering;

use crate::error::{Error, Result};
use crate::watchdog::{Lease, Release, Ticket};

use super::RwLock;

/// One read hold of a [`RwLock`]. Releasing it (explicitly with [`ReadGuard::unlock`], or by
/// dropping it) gives the hold back; once no hold is left, waiting writers are woken.
///
/// The guard owns what it needs (`'static`, `Send`, `Sync`), so it can move into a spawned task.
/// Dropping it never blocks: the release is handed to the client's background task.
#[must_use = "dropping the guard releases the read hold at once"]
pub struct ReadGuard {
    rw: RwLock,
    ticket: Ticket,
    lease: Lease,
    fencing_token: u64,
    released: bool,
}

impl fmt::Debug for ReadGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReadGuard")
            .field("lock", &self.rw.inner.name)
            .field("fencing_token", &self.fencing_token)
            .field("lease", &self.lease)
            .field("lost", &self.is_lost())
            .finish()
    }
}

impl ReadGuard {
    pub(super) fn new(rw: RwLock, ticket: Ticket, lease: Lease, fencing_token: u64) -> ReadGuard {
        rw.inner.read_guards.fetch_add(1, Ordering::AcqRel);
        ReadGuard {
            rw,
            ticket,
            lease,
            fencing_token,
            released: false,
        }
    }

    /// The fencing token seen by this read: the token of the latest write hold granted before
    /// it (0 if there was none). Reads do not advance it; every later write hold gets a larger
    /// one.
    pub fn fencing_token(&self) -> u64 {
        self.fencing_token
    }

    /// The read-write lock this guard holds.
    pub fn rw_lock(&self) -> &RwLock {
        &self.rw
    }

    /// Whether the hold is known to be lost (see [`ReadGuard::lost`]).
    pub fn is_lost(&self) -> bool {
        self.ticket.lost.is_cancelled()
    }

    /// Resolves when the hold is lost: the watchdog found this reader's holds gone (expired,
    /// force-unlocked), renewals failed until the lease ran out, or a fixed lease ran out. The
    /// future owns what it needs, so it can be raced against the work with `tokio::select!`.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only waits.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(config: latchkey::RwLock) -> latchkey::Result<()> {
    /// # async fn long_read() {}
    /// let guard = config.read().lock().await?;
    /// tokio::select! {
    ///     _ = guard.lost() => eprintln!("read lock lost, stopping"),
    ///     _ = long_read() => guard.unlock().await?,
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn lost(&self) -> impl Future<Output = ()> + Send + 'static {
        self.ticket.lost.clone().cancelled_owned()
    }

    /// Releases this read hold now and waits for Redis to confirm it. When it was the last hold
    /// of the lock, the key is deleted and Redisson's unlock message `"0"` is published.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future before it completes still releases the hold: either the release
    /// script was already sent, or the guard's drop hands it to the background task.
    ///
    /// # Errors
    ///
    /// [`Error::NotOwner`] if the hold was already gone (expired, lost, force-unlocked): nothing
    /// is changed then. Connection errors if Redis cannot be reached; the hold then expires with
    /// its lease, unless this handle reads again first: its next read acquire drops the
    /// stranded hold (and its lease key) and takes a fresh one.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(config: latchkey::RwLock) -> latchkey::Result<()> {
    /// let guard = config.read().lock().await?;
    /// guard.unlock().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn unlock(mut self) -> Result<()> {
        self.released = true;
        let inner = &self.rw.inner;
        let client = &inner.client;
        let release = client.inner.registry.released(
            &inner.read_hold,
            &self.ticket,
            self.lease,
            client.inner.config.watchdog_timeout,
        );
        let Release::Redis { lease_ms, mark, .. } = release else {
            return Err(Error::NotOwner {
                name: inner.name.clone(),
            });
        };
        let left: i64 = self
            .rw
            .read_release_task(lease_ms)
            .releasing(mark)
            .run_detached(&client.inner.conn, &inner.name)
            .await?;
        if left < 0 {
            return Err(Error::NotOwner {
                name: inner.name.clone(),
            });
        }
        Ok(())
    }
}

impl Drop for ReadGuard {
    fn drop(&mut self) {
        self.rw.inner.read_guards.fetch_sub(1, Ordering::AcqRel);
        if self.released {
            return;
        }
        let inner = &self.rw.inner;
        let client = &inner.client.inner;
        let release = client.registry.released(
            &inner.read_hold,
            &self.ticket,
            self.lease,
            client.config.watchdog_timeout,
        );
        if let Release::Redis { lease_ms, mark, .. } = release {
            let _ = client
                .background
                .send(self.rw.read_release_task(lease_ms).releasing(mark));
        }
    }
}
