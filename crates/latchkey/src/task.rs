//! Running work that must finish even if the caller stops waiting for it.

use std::future::Future;

use crate::error::{Error, Result};

/// Runs `work` in its own task (spawned at once) and returns a future of its output.
///
/// If the returned future is dropped, `work` still runs to completion and its output is dropped
/// there. Acquire paths use it so that a caller who goes away cannot strand a hold: the output is
/// a guard, and dropping the guard releases the hold.
///
/// The returned future holds only the task's handle, so the caller's future type does not nest
/// `work`'s (deeply nested driver futures would otherwise overflow the compiler's layout depth
/// limit in the crates that await our futures).
pub(crate) fn detached<T, F>(work: F) -> impl Future<Output = Result<T>> + Send
where
    F: Future<Output = T> + Send + 'static,
    T: Send + 'static,
{
    let handle = tokio::spawn(work);
    async move { handle.await.map_err(|_| Error::Closed) }
}
