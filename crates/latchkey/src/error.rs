//! The one error type of latchkey.

use std::fmt;
use std::time::Duration;

/// A `Result` whose error is [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in latchkey.
///
/// Match on the variants you care about, or ask the predicates (`is_*`), which keep working when
/// new variants are added. Messages are lowercase and say what was wrong and what to do.
///
/// A message does not repeat its cause. The variants that wrap a driver error
/// ([`Unreachable`](Error::Unreachable), [`AuthFailed`](Error::AuthFailed),
/// [`PermissionDenied`](Error::PermissionDenied) and [`Redis`](Error::Redis)) return the
/// [`redis::RedisError`] from [`source()`](std::error::Error::source), where it can be downcast;
/// to show it, print the whole chain of causes (anyhow's `{:#}`, eyre's reports, or a loop over
/// `source()`), as the `latchkey` command does.
///
/// # Examples
///
/// ```
/// use latchkey::Error;
///
/// let err = Error::NotOwner { name: "orders:1001".into() };
/// assert!(err.is_not_owner());
/// assert_eq!(
///     err.to_string(),
///     "lock `orders:1001` is not held by this handle (expired, released, or taken by another owner)"
/// );
/// ```
///
/// The cause of a connection error is its `source()`, not part of its message:
///
/// ```
/// use std::error::Error as _;
///
/// let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
/// let err = latchkey::Error::Unreachable { context: "connecting", source: refused.into() };
/// assert!(err.is_connection());
/// assert_eq!(err.to_string(), "cannot reach redis (connecting)");
/// let cause = err.source().and_then(|s| s.downcast_ref::<redis::RedisError>()).unwrap();
/// assert!(cause.is_connection_refusal());
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An argument was rejected before anything was sent to Redis; nothing changed.
    #[error("invalid {what}: {reason}")]
    InvalidArgument {
        /// Which argument (`"lock name"`, `"lease"`, …).
        what: &'static str,
        /// Why it was rejected and what would be accepted.
        reason: String,
    },

    /// The caller does not hold the lock it tried to release; nothing changed.
    #[error(
        "lock `{name}` is not held by this handle (expired, released, or taken by another owner)"
    )]
    NotOwner {
        /// The lock's name.
        name: String,
    },

    /// A key that latchkey needs holds a value of another type; the script changed nothing.
    #[error(
        "key `{key}` holds data of another type ({detail}); use another name or delete that key"
    )]
    WrongType {
        /// The key as given by the caller (without the namespace prefix).
        key: String,
        /// What Redis found.
        detail: String,
    },

    /// The wait for a lock or permit ran out.
    #[error("gave up waiting for `{name}` after {waited:?}")]
    WaitTimedOut {
        /// The object's name.
        name: String,
        /// How long the caller waited.
        waited: Duration,
    },

    /// A command did not complete within the configured timeout. For a mutation the outcome is
    /// uncertain: it may or may not have been applied. A lock taken that way is never renewed,
    /// so it expires after its lease.
    #[error("redis did not answer within {timeout:?} ({context}); the outcome is uncertain")]
    Timeout {
        /// The command timeout that ran out.
        timeout: Duration,
        /// What was being done.
        context: &'static str,
    },

    /// Redis could not be reached (connection refused, reset or closed, TLS handshake failed, or
    /// the sentinels know no primary during a failover); retrying later may succeed. The message
    /// says what was being done; why it failed is the `source()`.
    #[error("cannot reach redis ({context})")]
    Unreachable {
        /// What was being done.
        context: &'static str,
        /// The underlying error, returned by `source()` (not repeated in the message).
        #[source]
        source: redis::RedisError,
    },

    /// Redis refused the credentials. Not retried: fix the user name or password. Redis' reply
    /// is the `source()`; the password is never part of the message.
    #[error("redis rejected the credentials; check the user name and password")]
    AuthFailed {
        /// The underlying error, returned by `source()` (not repeated in the message).
        #[source]
        source: redis::RedisError,
    },

    /// The ACL user lacks a permission latchkey needs. Not retried: see the README's ACL section.
    /// Redis' reply, naming the command or key, is the `source()`.
    #[error(
        "redis refused a command for lack of permission; grant the ACL user the permissions \
         listed in latchkey's README"
    )]
    PermissionDenied {
        /// The underlying error, returned by `source()` (not repeated in the message).
        #[source]
        source: redis::RedisError,
    },

    /// The connection settings are unusable (bad URL, TLS files, …).
    #[error("invalid configuration: {reason}")]
    Config {
        /// What is wrong.
        reason: String,
    },

    /// Fewer nodes than a quorum could be locked (RedLock).
    #[error("only {acquired} of {nodes} nodes could be locked; {quorum} are needed")]
    QuorumUnavailable {
        /// How many nodes granted the lock.
        acquired: usize,
        /// How many nodes there are.
        nodes: usize,
        /// How many are needed.
        quorum: usize,
    },

    /// A read lock holder asked for the write lock of the same read-write lock. Upgrading would
    /// deadlock two upgraders, so it is refused; release the read lock first.
    #[error("read-write lock `{name}`: cannot upgrade a read hold to a write hold; release the read lock first")]
    UpgradeNotSupported {
        /// The lock's name.
        name: String,
    },

    /// A permit id that this semaphore does not know (never issued, already released, or expired).
    #[error("semaphore `{name}`: permit `{permit}` is unknown, already released, or expired")]
    UnknownPermit {
        /// The semaphore's name.
        name: String,
        /// The permit id.
        permit: String,
    },

    /// More permits released without a guard than the semaphore was set up with, as latchkey
    /// recorded it; nothing changed. A guard's release is never refused.
    #[error("semaphore `{name}`: releasing {released} permits would exceed its {total} permits; if a Redisson client added permits, give these back with `add_permits`")]
    OverRelease {
        /// The semaphore's name.
        name: String,
        /// How many were being released.
        released: u64,
        /// How many permits the semaphore has in all.
        total: u64,
    },

    /// A value could not be encoded or decoded by the queue's codec.
    #[error("codec error: {reason}")]
    Codec {
        /// What went wrong.
        reason: String,
    },

    /// Too few replicas acknowledged an acquire within the timeout (replica-synced acquire of a
    /// lock, fair lock, read-write lock or semaphore); the grant was undone, so nothing is held.
    #[error(
        "{acknowledged} of the {required} replica(s) required acknowledged `{name}` within \
         {timeout:?}; the acquire was undone"
    )]
    NotReplicated {
        /// The object's name.
        name: String,
        /// The WAIT timeout.
        timeout: Duration,
        /// How many replicas had to acknowledge the acquire.
        required: u32,
        /// How many did in time.
        acknowledged: u32,
    },

    /// The client has been shut down (its background tasks are gone).
    #[error("the latchkey client has shut down")]
    Closed,

    /// Any other error reported by Redis or the driver, or a reply latchkey did not expect. The
    /// driver's error, which says what went wrong, is the `source()`.
    #[error("a redis request failed")]
    Redis(
        /// The underlying error, returned by `source()` (not repeated in the message).
        #[source]
        redis::RedisError,
    ),
}

impl Error {
    /// An argument was rejected before anything was sent.
    pub fn is_invalid_argument(&self) -> bool {
        matches!(self, Error::InvalidArgument { .. })
    }

    /// The caller did not hold the lock it tried to release.
    pub fn is_not_owner(&self) -> bool {
        matches!(self, Error::NotOwner { .. })
    }

    /// A key held data of another type.
    pub fn is_wrong_type(&self) -> bool {
        matches!(self, Error::WrongType { .. })
    }

    /// A wait or a command ran out of time.
    pub fn is_timeout(&self) -> bool {
        matches!(self, Error::WaitTimedOut { .. } | Error::Timeout { .. })
    }

    /// The outcome of a mutation is unknown (the command timed out after it was sent).
    pub fn is_uncertain(&self) -> bool {
        matches!(self, Error::Timeout { .. })
    }

    /// Redis could not be reached, or did not answer; retrying later may succeed.
    pub fn is_connection(&self) -> bool {
        matches!(self, Error::Unreachable { .. } | Error::Timeout { .. })
    }

    /// Credentials or permissions were refused; retrying will not help.
    pub fn is_auth(&self) -> bool {
        matches!(
            self,
            Error::AuthFailed { .. } | Error::PermissionDenied { .. }
        )
    }

    /// Not enough RedLock nodes could be locked.
    pub fn is_quorum_unavailable(&self) -> bool {
        matches!(self, Error::QuorumUnavailable { .. })
    }

    /// Too few replicas acknowledged an acquire in time (replica sync); it was undone.
    pub fn is_not_replicated(&self) -> bool {
        matches!(self, Error::NotReplicated { .. })
    }

    /// This error and its causes on one line, joined with ": " — what an error reporter that
    /// walks [`source()`](std::error::Error::source) prints (the message alone leaves the cause
    /// out). For log lines: `tracing::warn!(error = %err.chain(), "…")`.
    ///
    /// # Examples
    ///
    /// ```
    /// let refused = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
    /// let err = latchkey::Error::Unreachable { context: "connecting", source: refused.into() };
    /// assert_eq!(err.to_string(), "cannot reach redis (connecting)");
    /// assert!(err.chain().to_string().starts_with("cannot reach redis (connecting): "));
    /// assert!(err.chain().to_string().contains("refused"));
    /// ```
    pub fn chain(&self) -> impl fmt::Display + '_ {
        Chain(self)
    }

    pub(crate) fn invalid(what: &'static str, reason: impl Into<String>) -> Error {
        Error::InvalidArgument {
            what,
            reason: reason.into(),
        }
    }

    /// Classifies a driver error. `key` names the object for `WRONGTYPE` replies.
    pub(crate) fn from_redis(
        err: redis::RedisError,
        context: &'static str,
        key: &str,
        timeout: Duration,
    ) -> Error {
        use redis::{ErrorKind, ServerErrorKind};
        if err.code() == Some("WRONGTYPE") {
            return Error::WrongType {
                key: key.to_owned(),
                detail: err.detail().unwrap_or("unexpected type").to_owned(),
            };
        }
        match err.kind() {
            ErrorKind::AuthenticationFailed => Error::AuthFailed { source: err },
            ErrorKind::Server(ServerErrorKind::NoPerm) => Error::PermissionDenied { source: err },
            // A command inside a script that the ACL user may not run.
            _ if err
                .detail()
                .is_some_and(|d| d.contains("can't run this command") || d.contains("NOPERM"))
                || err.to_string().contains("can't run this command") =>
            {
                Error::PermissionDenied { source: err }
            }
            // The sentinels do not (yet) know a primary: a failover is under way.
            ErrorKind::MasterNameNotFoundBySentinel
            | ErrorKind::NoValidReplicasFoundBySentinel
            | ErrorKind::EmptySentinelList => Error::Unreachable {
                context,
                source: err,
            },
            _ if err.code() == Some("NOAUTH") || err.code() == Some("WRONGPASS") => {
                Error::AuthFailed { source: err }
            }
            _ if err.is_timeout() => Error::Timeout { timeout, context },
            _ if err.is_io_error()
                || err.is_connection_dropped()
                || err.is_connection_refusal() =>
            {
                Error::Unreachable {
                    context,
                    source: err,
                }
            }
            _ => Error::Redis(err),
        }
    }
}

/// An error and its causes on one line: see [`Error::chain`].
struct Chain<'a>(&'a (dyn std::error::Error + 'static));

impl fmt::Display for Chain<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut previous: Option<String> = None;
        let mut next = Some(self.0);
        while let Some(error) = next {
            let text = error.to_string();
            // `redis::RedisError` prints the error it wraps and also returns it from `source()`:
            // a cause that repeats the one before it is left out.
            if previous.as_deref() != Some(text.as_str()) {
                if previous.is_some() {
                    f.write_str(": ")?;
                }
                f.write_str(&text)?;
            }
            previous = Some(text);
            next = error.source();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::error::Error as _;
    use std::io;

    use super::*;

    fn driver_error(kind: io::ErrorKind) -> redis::RedisError {
        io::Error::new(kind, "the cause, in the driver's words").into()
    }

    /// Every variant that wraps a driver error: its message stands on its own, and the cause is
    /// `source()` only (an error reporter that walks the chain prints it once).
    #[test]
    fn a_wrapped_cause_is_the_source_and_not_in_the_message() {
        let errors = [
            Error::Unreachable {
                context: "connecting",
                source: driver_error(io::ErrorKind::ConnectionRefused),
            },
            Error::AuthFailed {
                source: driver_error(io::ErrorKind::Other),
            },
            Error::PermissionDenied {
                source: driver_error(io::ErrorKind::Other),
            },
            Error::Redis(driver_error(io::ErrorKind::Other)),
        ];
        for err in errors {
            let message = err.to_string();
            assert!(!message.contains("driver's words"), "{message}");
            let source = err.source().expect("a source");
            assert!(source.is::<redis::RedisError>(), "{err:?}");
            assert!(source.to_string().contains("driver's words"), "{err:?}");
            let chain = err.chain().to_string();
            assert_eq!(chain.matches("driver's words").count(), 1, "{chain}");
            assert!(chain.starts_with(&format!("{message}: ")), "{chain}");
        }
    }

    #[test]
    fn the_messages_of_the_wrapping_variants() {
        let source = || driver_error(io::ErrorKind::Other);
        assert_eq!(
            Error::Unreachable {
                context: "renewing locks",
                source: source()
            }
            .to_string(),
            "cannot reach redis (renewing locks)"
        );
        assert_eq!(
            Error::AuthFailed { source: source() }.to_string(),
            "redis rejected the credentials; check the user name and password"
        );
        assert_eq!(
            Error::PermissionDenied { source: source() }.to_string(),
            "redis refused a command for lack of permission; grant the ACL user the \
             permissions listed in latchkey's README"
        );
        assert_eq!(Error::Redis(source()).to_string(), "a redis request failed");
    }

    #[test]
    fn the_chain_of_an_error_without_a_source_is_its_message() {
        let err = Error::NotOwner { name: "n".into() };
        assert_eq!(err.chain().to_string(), err.to_string());
    }
}
