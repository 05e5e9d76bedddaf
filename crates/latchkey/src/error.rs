//! The one error type of latchkey.

use std::fmt;
use std::ops::RangeInclusive;
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
/// use latchkey_redis::Error;
///
/// let err = Error::NotOwner { name: "orders:1001".into() };
/// assert!(err.is_not_owner());
/// assert_eq!(
///     err.to_string(),
///     "lock `orders:1001` is not held by this guard (expired, released, or taken by another owner)"
/// );
/// ```
///
/// The cause of a connection error is its `source()`, not part of its message:
///
/// ```
/// use std::error::Error as _;
///
/// let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
/// let err = latchkey_redis::Error::Unreachable { context: "connecting", source: refused.into() };
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
        "lock `{name}` is not held by this guard (expired, released, or taken by another owner)"
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
    /// the sentinels know no primary during a failover), or answered that it cannot serve for
    /// now (`LOADING` its data after a restart, a demoted primary's `READONLY`, `MASTERDOWN`, a
    /// cluster's `TRYAGAIN` or `CLUSTERDOWN`, `BUSY` with a long script; nothing was written
    /// then). Retrying later may succeed. A connection that broke after a command was sent may
    /// have run it. The message says what was being done; why it failed is the `source()`.
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

    /// The ACL user lacks a permission latchkey needs: a command, or access to a key or a
    /// channel, refused to a plain command (`NOPERM`) or to a command a script ran. Not retried;
    /// the message says what was refused and which kind of ACL rule grants it (the README's ACL
    /// section lists them all). Redis' reply is the `source()`.
    #[error(
        "redis refused the ACL user {refused}; grant {} (see the ACL section of latchkey's README)",
        refused.grant()
    )]
    PermissionDenied {
        /// What was refused.
        refused: Refused,
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

    /// The URL needs a cargo feature of latchkey that this build leaves out: `tls` for
    /// `rediss://`, `cluster` for `redis+cluster://`, `sentinel` for `redis+sentinel://`.
    /// Nothing was sent; enable the feature in `Cargo.toml`.
    ///
    /// ```
    /// let err = latchkey_redis::Error::FeatureDisabled {
    ///     feature: "cluster",
    ///     what: "the Cluster url `redis+cluster://127.0.0.1:7000`".into(),
    /// };
    /// assert!(err.is_feature_disabled());
    /// assert!(err.to_string().contains(r#"features = ["cluster"]"#));
    /// ```
    #[error(
        "{what} needs latchkey's `{feature}` feature, which this build leaves out; enable it in \
         Cargo.toml: latchkey-redis = {{ version = \"…\", features = [\"{feature}\"] }}"
    )]
    FeatureDisabled {
        /// The feature to enable: `"tls"`, `"cluster"` or `"sentinel"`.
        feature: &'static str,
        /// What needed it (the URL, its password hidden).
        what: String,
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

    /// A semaphore's permits were never set (its key does not exist): an acquire would wait
    /// for ever. Set them with `try_set_permits`, or make the handle wait for another service
    /// to set them with `wait_for_init()`.
    #[error("semaphore `{name}` has no permits set; call `try_set_permits` first, or use the handle's `wait_for_init()` to wait for another service to set them")]
    NotInitialized {
        /// The semaphore's name.
        name: String,
    },

    /// A rate limiter's rate was never set (its config hash does not exist: never set, deleted,
    /// or expired with its keep-alive time); nothing changed. Set it with `try_set_rate`, or
    /// let the service that owns the limiter set it.
    #[error("rate limiter `{name}` has no rate set; call `try_set_rate` first, or let the service that owns it set it")]
    RateNotSet {
        /// The rate limiter's name.
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
        released: u32,
        /// How many permits the semaphore has in all (latchkey's record).
        total: u32,
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

/// What Redis refused an ACL user ([`Error::PermissionDenied`]).
///
/// Redis names a command it refuses, but not the key or channel it refused access to: for those
/// latchkey names the object it was working on (the README lists each object's keys and
/// channels), or the channel it was subscribing to. A script checks, before it writes anything,
/// that the user may run its commands and publish to its channels, and refuses in Redis' own
/// words (so nothing changed); a command refused later inside a script is named from the
/// script's line that Redis reports.
///
/// # Examples
///
/// ```
/// use latchkey_redis::Refused;
///
/// assert_eq!(Refused::Command(Some("publish".into())).to_string(), "the `publish` command");
/// assert_eq!(Refused::KeyOf("orders".into()).to_string(), "access to a key of `orders`");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Refused {
    /// A command, named as ACL rules name it (`publish`, `script|load`, `cluster|slots`);
    /// `None` when Redis did not say which.
    Command(Option<String>),
    /// A key of the named object: one of the key or channel names given to a script as `KEYS`
    /// (they are checked against the key patterns, `~`), or a key a command uses.
    KeyOf(String),
    /// A channel of the named object that a script published to.
    ChannelOf(String),
    /// This channel, subscribed to.
    Channel(String),
}

impl Refused {
    /// Which kind of ACL rule grants what was refused.
    fn grant(&self) -> String {
        match self {
            Refused::Command(Some(command)) => format!("`+{command}`"),
            Refused::Command(None) => "the missing command (`+<command>`)".to_owned(),
            Refused::KeyOf(_) => "a key pattern (`~`) covering it".to_owned(),
            Refused::ChannelOf(_) | Refused::Channel(_) => {
                "a channel pattern (`&`) covering it".to_owned()
            }
        }
    }

    /// What a permission refusal refused, if `err` is one. `object` is what latchkey was working
    /// on: an object's name, or a channel's while `context` is (re)subscribing.
    fn of(err: &redis::RedisError, context: &str, object: &str) -> Option<Refused> {
        let text = match err.detail() {
            Some(detail) => format!("{} {detail}", err.code().unwrap_or_default()),
            None => err.to_string(),
        };
        let channel = || {
            if context.ends_with("subscribing") {
                Refused::Channel(object.to_owned())
            } else {
                Refused::ChannelOf(object.to_owned())
            }
        };
        // Valkey 8 words a refusal inside a script as a plain one, after "ACL failure in
        // script: ".
        let noperm = matches!(
            err.kind(),
            redis::ErrorKind::Server(redis::ServerErrorKind::NoPerm)
        ) || text.contains("NOPERM")
            || text.contains("ACL failure in script");
        if noperm {
            // Redis 7.0: "this user has no permissions to run the 'publish' command", "... to
            // access one of the keys used as arguments", "... of the channels ..."; Redis 7.2
            // and later, Valkey: "User u has no permissions to run the 'publish' command", "No
            // permissions to access a key", "... a channel".
            if let Some(command) = quoted_after(&text, "to run the '") {
                return Some(Refused::Command(Some(command.to_ascii_lowercase())));
            }
            let lower = text.to_ascii_lowercase();
            return Some(if lower.contains("channel") {
                channel()
            } else if lower.contains("key") {
                Refused::KeyOf(object.to_owned())
            } else {
                Refused::Command(None)
            });
        }
        // Inside a script: "The user executing the script can't run this command or
        // subcommand", "... can't access at least one of the keys mentioned in the command
        // arguments", "... can't publish to the channel mentioned in the command", each
        // followed (from `redis.call`) by "script: <sha>, on @user_script:<line>.".
        let (_, refusal) = text.split_once("The user executing the script can't ")?;
        Some(if refusal.starts_with("run ") {
            Refused::Command(script_command(refusal))
        } else if refusal.starts_with("publish") || refusal.contains("channel") {
            channel()
        } else {
            Refused::KeyOf(object.to_owned())
        })
    }
}

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refused::Command(Some(command)) => write!(f, "the `{command}` command"),
            Refused::Command(None) => f.write_str("a command run by a script"),
            Refused::KeyOf(object) if object.is_empty() => f.write_str("access to a key"),
            Refused::KeyOf(object) => write!(f, "access to a key of `{object}`"),
            Refused::ChannelOf(object) if object.is_empty() => f.write_str("access to a channel"),
            Refused::ChannelOf(object) => write!(f, "access to a channel of `{object}`"),
            Refused::Channel(channel) => write!(f, "access to the channel `{channel}`"),
        }
    }
}

/// The text between `prefix` and the next `'`.
fn quoted_after<'a>(text: &'a str, prefix: &str) -> Option<&'a str> {
    let (_, rest) = text.split_once(prefix)?;
    let (quoted, _) = rest.split_once('\'')?;
    (!quoted.is_empty()).then_some(quoted)
}

/// The command a script's `redis.call` ran on the line Redis reports in `refusal` ("… script:
/// <sha>, on @user_script:<line>."), if that line calls one command by name. The scripts take
/// their publish command (`publish` or `spublish`) as an argument into a variable named
/// `publish`; it is reported as `publish` here and made `spublish` on a cluster by the caller.
fn script_command(refusal: &str) -> Option<String> {
    let (_, place) = refusal.split_once("script: ")?;
    let (sha, place) = place.split_once(", on @user_script:")?;
    let line: usize = place
        .trim_end_matches(|c: char| !c.is_ascii_digit())
        .parse()
        .ok()?;
    let source = crate::scripts::BY_HASH.get(sha.trim())?;
    let code = source.lines().nth(line.checked_sub(1)?)?;
    let mut calls = code.match_indices("redis.").filter_map(|(at, _)| {
        let rest = &code[at + "redis.".len()..];
        let args = rest
            .strip_prefix("call(")
            .or_else(|| rest.strip_prefix("pcall("))?;
        let first = args.split([',', ')']).next()?.trim();
        if first == "publish" {
            return Some("publish".to_owned());
        }
        let name = first
            .strip_prefix('\'')
            .and_then(|n| n.strip_suffix('\''))
            .or_else(|| first.strip_prefix('"').and_then(|n| n.strip_suffix('"')))?;
        Some(name.to_ascii_lowercase())
    });
    let command = calls.next()?;
    // Two commands on one line: Redis does not say which of them was refused.
    calls.next().is_none().then_some(command)
}

/// The codes of replies from a server that cannot serve for now (see [`Error::Unreachable`]).
const NOT_SERVING: &str = "LOADING READONLY MASTERDOWN TRYAGAIN CLUSTERDOWN BUSY";

/// The predicates (`is_*`): each says whether the error is one of the variants named.
macro_rules! predicates {
    ($($(#[$doc:meta])* $name:ident => $variant:pat,)+) => {
        impl Error {
            $(
                $(#[$doc])*
                pub fn $name(&self) -> bool {
                    matches!(self, $variant)
                }
            )+
        }
    };
}

predicates! {
    /// An argument was rejected before anything was sent ([`Error::InvalidArgument`]).
    is_invalid_argument => Error::InvalidArgument { .. },

    /// The caller did not hold the lock it tried to release ([`Error::NotOwner`]).
    is_not_owner => Error::NotOwner { .. },

    /// A key held data of another type ([`Error::WrongType`]).
    is_wrong_type => Error::WrongType { .. },

    /// The wait for a lock or permit ran out ([`Error::WaitTimedOut`]); nothing is held.
    is_wait_timed_out => Error::WaitTimedOut { .. },

    /// A wait or a command ran out of time: [`Error::WaitTimedOut`] or [`Error::Timeout`]
    /// (group predicate; [`is_wait_timed_out`](Error::is_wait_timed_out) and
    /// [`is_uncertain`](Error::is_uncertain) tell them apart).
    is_timeout => Error::WaitTimedOut { .. } | Error::Timeout { .. },

    /// The outcome of a mutation is unknown: the command timed out after it was sent
    /// ([`Error::Timeout`]; this is that variant's own predicate).
    is_uncertain => Error::Timeout { .. },

    /// Redis could not be reached ([`Error::Unreachable`]); retrying later may succeed.
    is_unreachable => Error::Unreachable { .. },

    /// Redis could not be reached, or did not answer: [`Error::Unreachable`] or
    /// [`Error::Timeout`] (group predicate); retrying later may succeed.
    is_connection => Error::Unreachable { .. } | Error::Timeout { .. },

    /// Redis refused the credentials ([`Error::AuthFailed`]).
    is_auth_failed => Error::AuthFailed { .. },

    /// The ACL user lacks a permission latchkey needs ([`Error::PermissionDenied`]).
    is_permission_denied => Error::PermissionDenied { .. },

    /// Credentials or permissions were refused: [`Error::AuthFailed`] or
    /// [`Error::PermissionDenied`] (group predicate); retrying will not help.
    is_auth => Error::AuthFailed { .. } | Error::PermissionDenied { .. },

    /// The connection settings are unusable ([`Error::Config`]).
    is_config => Error::Config { .. },

    /// The URL needs a cargo feature this build leaves out ([`Error::FeatureDisabled`]).
    is_feature_disabled => Error::FeatureDisabled { .. },

    /// Not enough RedLock nodes could be locked ([`Error::QuorumUnavailable`]).
    is_quorum_unavailable => Error::QuorumUnavailable { .. },

    /// A semaphore's permits were never set ([`Error::NotInitialized`]).
    is_not_initialized => Error::NotInitialized { .. },

    /// A rate limiter's rate was never set ([`Error::RateNotSet`]).
    is_rate_not_set => Error::RateNotSet { .. },

    /// A permit id the semaphore does not know ([`Error::UnknownPermit`]).
    is_unknown_permit => Error::UnknownPermit { .. },

    /// A release without a guard would exceed the semaphore's permits ([`Error::OverRelease`]).
    is_over_release => Error::OverRelease { .. },

    /// A value could not be encoded or decoded by the queue's codec ([`Error::Codec`]).
    is_codec => Error::Codec { .. },

    /// Too few replicas acknowledged an acquire in time ([`Error::NotReplicated`]); it was
    /// undone.
    is_not_replicated => Error::NotReplicated { .. },

    /// The client has been shut down ([`Error::Closed`]).
    is_closed => Error::Closed,

    /// Any other error from Redis or the driver, or a reply latchkey did not expect
    /// ([`Error::Redis`], the catch-all: a cause that has no variant of its own).
    is_redis => Error::Redis(_),
}

impl Error {
    /// This error and its causes on one line, joined with ": " — what an error reporter that
    /// walks [`source()`](std::error::Error::source) prints (the message alone leaves the cause
    /// out). For log lines: `tracing::warn!(error = %err.chain(), "…")`.
    ///
    /// # Examples
    ///
    /// ```
    /// let refused = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
    /// let err = latchkey_redis::Error::Unreachable { context: "connecting", source: refused.into() };
    /// assert_eq!(err.to_string(), "cannot reach redis (connecting)");
    /// assert!(err.chain().to_string().starts_with("cannot reach redis (connecting): "));
    /// assert!(err.chain().to_string().contains("refused"));
    /// ```
    pub fn chain(&self) -> impl fmt::Display + '_ {
        Chain(self)
    }

    /// An [`Error::NotOwner`] of the lock `name`.
    pub(crate) fn not_owner(name: &str) -> Error {
        let name = name.to_owned();
        Error::NotOwner { name }
    }

    /// An [`Error::Config`] saying `reason`.
    pub(crate) fn config(reason: impl Into<String>) -> Error {
        Error::Config {
            reason: reason.into(),
        }
    }

    pub(crate) fn invalid(what: &'static str, reason: impl Into<String>) -> Error {
        Error::InvalidArgument {
            what,
            reason: reason.into(),
        }
    }

    /// Classifies a driver error. `key` names the object for `WRONGTYPE` replies and permission
    /// refusals (the channel while `context` is "subscribing" or "resubscribing").
    pub(crate) fn from_redis(
        err: redis::RedisError,
        context: &'static str,
        key: &str,
        timeout: Duration,
    ) -> Error {
        use redis::ErrorKind;
        if err.code() == Some("WRONGTYPE") {
            // A script's refusal ends with where it was raised (" script: <sha>, on
            // @user_script:<line>."): of no use to the caller.
            let detail = err.detail().unwrap_or("unexpected type");
            let detail = detail
                .split_once(" script: ")
                .map_or(detail, |(what, _)| what);
            return Error::WrongType {
                key: key.to_owned(),
                detail: detail.to_owned(),
            };
        }
        if let Some(refused) = Refused::of(&err, context, key) {
            return Error::PermissionDenied {
                refused,
                source: err,
            };
        }
        match err.kind() {
            ErrorKind::AuthenticationFailed => Error::AuthFailed { source: err },
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
                || NOT_SERVING.split(' ').any(|code| err.code() == Some(code)) =>
            {
                Error::Unreachable {
                    context,
                    source: err,
                }
            }
            _ => Error::Redis(err),
        }
    }

    /// On a cluster the scripts publish with `spublish`: a refused `publish` (named from the
    /// script's `publish` variable) was that.
    pub(crate) fn sharded(self) -> Error {
        match self {
            Error::PermissionDenied {
                refused: Refused::Command(Some(command)),
                source,
            } if command == "publish" => Error::PermissionDenied {
                refused: Refused::Command(Some("spublish".to_owned())),
                source,
            },
            other => other,
        }
    }
}

/// Locks `mutex`. Every critical section of latchkey's mutexes is a few infallible updates, so
/// a panic while one was held leaves nothing torn: poisoning is ignored.
pub(crate) fn lock<T>(mutex: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

/// One millisecond, the shortest lease or per-node timeout accepted.
pub(crate) const MS: Duration = Duration::from_millis(1);
/// One hour, the longest timeout accepted.
pub(crate) const HOUR: Duration = Duration::from_secs(3600);

/// Checks a duration setting `what`: unless it is in `range`, the error says "`value` is out of
/// range; `hint`".
pub(crate) fn check_range(
    what: &'static str,
    value: Duration,
    range: RangeInclusive<Duration>,
    hint: &str,
) -> Result<()> {
    if range.contains(&value) {
        return Ok(());
    }
    Err(Error::invalid(
        what,
        format!("{value:?} is out of range; {hint}"),
    ))
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
#[path = "error_tests.rs"]
mod tests;
