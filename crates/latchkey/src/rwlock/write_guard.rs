//! The guard of one write hold of a read-write lock.

use std::fmt;
use std::future::Future;

use crate::error::{Error, Result};
use crate::watchdog::{Lease, Release, Ticket};

use super::RwLock;

/// One write hold of a [`RwLock`]. Releasing it (explicitly with [`WriteGuard::unlock`], or by
/// dropping it) gives the hold back; once every write hold is given back, every waiter is woken
/// (and the lock stays in read mode if the holder also took read holds).
///
/// The guard owns what it needs (`'static`, `Send`, `Sync`), so it can move into a spawned task.
/// Dropping it never blocks: the release is handed to the client's background task.
#[must_use = "dropping the guard releases the write lock at once"]
pub struct WriteGuard {
    rw: RwLock,
    ticket: Ticket,
    lease: Lease,
    fencing_token: u64,
    released: bool,
}

impl fmt::Debug for WriteGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WriteGuard")
            .field("lock", &self.rw.inner.name)
            .field("fencing_token", &self.fencing_token)
            .field("lease", &self.lease)
            .field("lost", &self.is_lost())
            .finish()
    }
}

impl WriteGuard {
    pub(super) fn new(rw: RwLock, ticket: Ticket, lease: Lease, fencing_token: u64) -> WriteGuard {
        WriteGuard {
            rw,
            ticket,
            lease,
            fencing_token,
            released: false,
        }
    }

    /// The fencing token of this write hold: strictly larger than the token of every earlier
    /// write holder of this lock (re-entered holds share their holder's token). Give it to the
    /// storage you write to, and have the storage refuse writes with a smaller token than one it
    /// has seen.
    pub fn fencing_token(&self) -> u64 {
        self.fencing_token
    }

    /// The read-write lock this guard holds.
    pub fn rw_lock(&self) -> &RwLock {
        &self.rw
    }

    /// Whether the hold is known to be lost (see [`WriteGuard::lost`]).
    pub fn is_lost(&self) -> bool {
        self.ticket.lost.is_cancelled()
    }

    /// Resolves when the hold is lost: the watchdog found the write lock gone or taken by
    /// someone else, renewals failed until the lease ran out, or a fixed lease ran out. The
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
    /// # async fn long_write() {}
    /// let guard = config.write().lock().await?;
    /// tokio::select! {
    ///     _ = guard.lost() => eprintln!("write lock lost, stopping"),
    ///     _ = long_write() => guard.unlock().await?,
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn lost(&self) -> impl Future<Output = ()> + Send + 'static {
        self.ticket.lost.clone().cancelled_owned()
    }

    /// Releases this write hold now and waits for Redis to confirm it. When it was the last
    /// write hold, Redisson's `"1"` (`READ_UNLOCK_MESSAGE`) is published so every waiter
    /// retries.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future before it completes still releases the hold: either the release
    /// script was already sent, or the guard's drop hands it to the background task.
    ///
    /// # Errors
    ///
    /// [`Error::NotOwner`] if the hold was already gone (expired, lost, force-unlocked): nothing
    /// is changed then, and a successor's lock is untouched. Connection errors if Redis cannot
    /// be reached; the hold then expires with its lease, unless this handle acquires again
    /// first: its next acquire takes the stranded hold over as a new hold (one hold, a new
    /// fencing token).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(config: latchkey::RwLock) -> latchkey::Result<()> {
    /// let guard = config.write().lock().await?;
    /// guard.unlock().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn unlock(mut self) -> Result<()> {
        self.released = true;
        let inner = &self.rw.inner;
        let client = &inner.client;
        let release = client.inner.registry.released(
            &inner.write_hold,
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
            .write_release_task(lease_ms)
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

impl Drop for WriteGuard {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        let inner = &self.rw.inner;
        let client = &inner.client.inner;
        let release = client.registry.released(
            &inner.write_hold,
            &self.ticket,
            self.lease,
            client.config.watchdog_timeout,
        );
        if let Release::Redis { lease_ms, mark, .. } = release {
            let _ = client
                .background
                .send(self.rw.write_release_task(lease_ms).releasing(mark));
        }
    }
}
