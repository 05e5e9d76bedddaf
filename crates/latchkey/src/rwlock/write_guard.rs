//! The guard of a write hold of a read-write lock.

use crate::error::Result;
use crate::guard::{lock_guard, Claim};
use crate::wait::Attempt;
use crate::watchdog::Lease;

use super::{read_attempt, ReadGuard, RwLock, WriteLock};

/// How long a downgrade waits through Redis stalls before it gives up.
const DOWNGRADE_STALLS: std::time::Duration = std::time::Duration::from_secs(5);

lock_guard!(
    /// A write hold of a [`RwLock`]. Releasing it (explicitly with [`WriteGuard::unlock`], or by
    /// dropping it and every guard [re-entered](WriteGuard::reenter) from it) wakes every waiter
    /// (and the lock stays in read mode if the holder [downgraded](WriteGuard::downgrade)).
    ///
    /// The guard owns what it needs (`'static`, `Send`, `Sync`), so it can move into a spawned task.
    /// Dropping it never blocks: the release is handed to the client's background task.
    #[must_use = "dropping the guard releases the write hold at once"]
    WriteGuard(WriteLock),
    "client.rw_lock(\"config\").write().lock()"
);

impl WriteGuard {
    /// The read-write lock this guard holds.
    pub fn rw_lock(&self) -> &RwLock {
        self.core.held().rw_lock()
    }

    /// Turns the write hold into a read hold, without letting another writer in between (as
    /// `tokio::sync::RwLockWriteGuard::downgrade`): takes a read hold under this hold's owner
    /// id (the write hold lets it in at once), then releases the write hold, which lets the
    /// waiting readers join. Two script calls. The read hold has the watchdog's lease and this
    /// hold's fencing token. Only the last guard of a hold can downgrade it: while guards
    /// [re-entered](WriteGuard::reenter) from it are alive they hold it for writing.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future leaves no hold it did not return: a read hold granted after the
    /// drop is released in the background, and the write guard, dropped with the future, is
    /// released as any dropped guard.
    ///
    /// # Errors
    ///
    /// [`Error::NotOwner`](crate::Error::NotOwner) if the write hold was already gone (nothing
    /// is granted then); [`Error::InvalidArgument`](crate::Error::InvalidArgument), nothing
    /// changed, while other guards share the hold (drop them first); connection errors. If releasing the write hold fails, the read hold is
    /// returned anyway, and the write hold ends with its lease (or the watchdog finds it
    /// released).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(client: latchkey_redis::Client) -> latchkey_redis::Result<()> {
    /// let config = client.rw_lock("config");
    /// let write = config.write().lock().await?;
    /// // … write the new configuration …
    /// let read = write.downgrade().await?; // other readers may join, no writer can
    /// // … read it back …
    /// read.unlock().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn downgrade(self) -> Result<ReadGuard> {
        if self.is_lost() {
            return Err(crate::Error::not_owner(self.rw_lock().name()));
        } else if self.core.guards() > 1 {
            let reason = "re-entered guards still hold it for writing; drop them first";
            return Err(crate::Error::invalid("downgrade", reason));
        }
        let owner = self
            .owner_id()
            .strip_suffix(":write")
            .unwrap_or(self.owner_id());
        let claim = Claim::with_owner(&self.rw_lock().read(), owner);
        let read = loop {
            match crate::task::detached_try(Box::pin(read_attempt(claim.clone(), Lease::Watchdog)))
                .await?
            {
                Attempt::Granted(read) => break read,
                // Refused: the write hold is gone (expired, forced) and somebody else holds
                // the lock now.
                Attempt::Wait { .. } => return Err(crate::Error::not_owner(self.rw_lock().name())),
                Attempt::Stalled(err) => {
                    let deadline = tokio::time::Instant::now() + DOWNGRADE_STALLS;
                    crate::stall::pause_before_retry(err, Some(deadline)).await?
                }
            }
        };
        if let Err(err) = self.unlock().await {
            tracing::debug!(error = %err.chain(), "latchkey: releasing a downgraded write hold failed");
        }
        Ok(read)
    }
}
