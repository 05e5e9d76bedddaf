//! Running work that must finish even if the caller stops waiting for it.

use std::future::Future;

use crate::error::{Error, Result};

/// Runs `work` in its own task and waits for its output.
///
/// If the returned future is dropped, `work` still runs to completion and its output is dropped
/// there. Acquire paths use it so that a caller who goes away cannot strand a hold: the output is
/// a guard, and dropping the guard releases the hold.
pub(crate) async fn detached<T, F>(work: F) -> Result<T>
where
    F: Future<Output = T> + Send + 'static,
    T: Send + 'static,
{
    tokio::spawn(work).await.map_err(|_| Error::Closed)
}
