//! The command connection: every call bounded by the command timeout, every error typed.

use std::time::Duration;

use redis::aio::ConnectionManager;
use redis::{FromRedisValue, ScriptInvocation};

use crate::error::{Error, Result};

/// The client's command connection (multiplexed, reconnecting), cheap to clone.
#[derive(Clone)]
pub(crate) struct Conn {
    manager: ConnectionManager,
    timeout: Duration,
}

impl Conn {
    pub(crate) fn new(manager: ConnectionManager, timeout: Duration) -> Conn {
        Conn { manager, timeout }
    }

    /// The command timeout.
    pub(crate) fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Runs a script (EVALSHA, loading it on NOSCRIPT) within the command timeout.
    ///
    /// `context` says what was being done and `key` names the object, for error messages.
    pub(crate) async fn script<T: FromRedisValue>(
        &self,
        invocation: &ScriptInvocation<'_>,
        context: &'static str,
        key: &str,
    ) -> Result<T> {
        self.script_within(invocation, context, key, self.timeout)
            .await
    }

    /// Like [`Conn::script`] with another timeout.
    pub(crate) async fn script_within<T: FromRedisValue>(
        &self,
        invocation: &ScriptInvocation<'_>,
        context: &'static str,
        key: &str,
        timeout: Duration,
    ) -> Result<T> {
        let mut manager = self.manager.clone();
        match tokio::time::timeout(timeout, invocation.invoke_async(&mut manager)).await {
            Ok(result) => result.map_err(|e| Error::from_redis(e, context, key, timeout)),
            Err(_) => Err(Error::Timeout { timeout, context }),
        }
    }

    /// Runs one command within the command timeout.
    pub(crate) async fn query<T: FromRedisValue>(
        &self,
        cmd: &redis::Cmd,
        context: &'static str,
        key: &str,
    ) -> Result<T> {
        let mut manager = self.manager.clone();
        match tokio::time::timeout(self.timeout, cmd.query_async(&mut manager)).await {
            Ok(result) => result.map_err(|e| Error::from_redis(e, context, key, self.timeout)),
            Err(_) => Err(Error::Timeout {
                timeout: self.timeout,
                context,
            }),
        }
    }
}
