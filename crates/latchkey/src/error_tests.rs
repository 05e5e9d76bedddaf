//! Unit tests of `crate::error`.

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
            refused: Refused::Command(Some("publish".into())),
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
        Error::PermissionDenied {
            refused: Refused::Command(Some("publish".into())),
            source: source()
        }
        .to_string(),
        "redis refused the ACL user the `publish` command; grant `+publish` (see the ACL \
         section of latchkey's README)"
    );
    assert_eq!(Error::Redis(source()).to_string(), "a redis request failed");
}

#[test]
fn the_chain_of_an_error_without_a_source_is_its_message() {
    let err = Error::NotOwner { name: "n".into() };
    assert_eq!(err.chain().to_string(), err.to_string());
}
/// A server error reply as the driver returns it.
fn reply(line: &str) -> redis::RedisError {
    redis::parse_redis_value(format!("-{line}\r\n").as_bytes())
        .and_then(redis::Value::extract_error)
        .expect_err("an error reply")
}

/// A WRONGTYPE reply says what the key holds, without the place in the script that raised it.
#[test]
fn wrongtype_replies_say_what_the_key_holds() {
    let detail = |line: &str| match Error::from_redis(reply(line), "locking", "o", Duration::ZERO) {
        Error::WrongType { key, detail } => {
            assert_eq!(key, "o");
            detail
        }
        other => panic!("{line}: {other:?}"),
    };
    assert_eq!(
        detail(
            "WRONGTYPE the lock key holds a string, not a hash script: \
             4ad9dd692dc423b17ced85a938b09c2b69c971aa, on @user_script:57."
        ),
        "the lock key holds a string, not a hash"
    );
    assert_eq!(
        detail("WRONGTYPE Operation against a key holding the wrong kind of value"),
        "Operation against a key holding the wrong kind of value"
    );
}

/// A server that cannot serve for now (restarting, demoted, between primaries, busy with a
/// script) ran nothing: the error is a connection error, which callers and the background
/// task's resending treat as "retry later"; other replies stay `Redis` errors.
#[test]
fn a_server_that_cannot_serve_for_now_is_unreachable() {
    let classify = |line: &str| Error::from_redis(reply(line), "releasing", "o", Duration::ZERO);
    for line in [
        "LOADING Redis is loading the dataset in memory",
        "READONLY You can't write against a read only replica.",
        "MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'.",
        "TRYAGAIN Multiple keys request during rehashing of slot",
        "CLUSTERDOWN The cluster is down",
        "BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSCRIPT.",
    ] {
        let err = classify(line);
        assert!(
            err.is_unreachable() && err.is_connection(),
            "{line}: {err:?}"
        );
        let detail = line.split_once(' ').unwrap().1;
        assert!(
            err.chain().to_string().contains(detail),
            "{line}: {}",
            err.chain()
        );
    }
    let err = classify("ERR Error running script: something else");
    assert!(matches!(err, Error::Redis(_)), "{err:?}");
}

fn refused(line: &str, context: &'static str, object: &str) -> Refused {
    match Error::from_redis(reply(line), context, object, Duration::from_secs(1)) {
        Error::PermissionDenied { refused, source } => {
            assert!(source.to_string().contains(&line[8..]), "{source}");
            refused
        }
        other => panic!("{line}: {other:?}"),
    }
}

/// The refusals of plain commands, verbatim from redis-server 7.0.15 (and 7.2's wording), and
/// of a command inside a script from valkey-server 8.0.1.
#[test]
fn noperm_replies_name_the_command_key_or_channel() {
    let cases = [
        (
            "NOPERM this user has no permissions to run the 'publish' command",
            Refused::Command(Some("publish".into())),
        ),
        (
            "NOPERM this user has no permissions to run the 'script|load' command",
            Refused::Command(Some("script|load".into())),
        ),
        (
            "NOPERM User app has no permissions to run the 'cluster|slots' command",
            Refused::Command(Some("cluster|slots".into())),
        ),
        (
            "NOPERM this user has no permissions to access one of the keys used as arguments",
            Refused::KeyOf("orders".into()),
        ),
        (
            "NOPERM No permissions to access a key",
            Refused::KeyOf("orders".into()),
        ),
        (
            "NOPERM this user has no permissions to access one of the channels used as \
             arguments",
            Refused::ChannelOf("orders".into()),
        ),
        // Valkey 8.0, inside a script.
        (
            "ERR ACL failure in script: User app has no permissions to run the 'time' \
             command script: 4fdd234395d0244f63be3abaaf9a566e1a41f64a, on @user_script:125.",
            Refused::Command(Some("time".into())),
        ),
    ];
    for (line, want) in cases {
        assert_eq!(refused(line, "locking", "orders"), want, "{line}");
    }
    let channel = "NOPERM this user has no permissions to access one of the channels used \
                   as arguments";
    for context in ["subscribing", "resubscribing"] {
        assert_eq!(
            refused(channel, context, "redisson_lock__channel:{orders}"),
            Refused::Channel("redisson_lock__channel:{orders}".into())
        );
    }
}

/// The refusals raised inside a script, verbatim from redis-server 7.0.15: the command is
/// named from the script line Redis reports (a line of the prelude and the script together).
#[test]
fn script_refusals_name_the_command_key_or_channel() {
    let source_of = |script: &redis::Script| {
        *crate::scripts::SOURCES
            .iter()
            .find(|source| redis::Script::new(source).get_hash() == script.get_hash())
            .expect("every script is in SOURCES")
    };
    let (release, acquire) = (
        &*crate::scripts::LOCK_RELEASE,
        &*crate::scripts::LOCK_ACQUIRE,
    );
    let (release_source, acquire_source) = (source_of(release), source_of(acquire));
    let at = |script: &redis::Script, line: usize| {
        format!("script: {}, on @user_script:{line}.", script.get_hash())
    };
    // The lines this test relies on, as Redis numbers them (from 1).
    let line_of = |source: &str, code: &str| {
        let found: Vec<usize> = (1..)
            .zip(source.lines())
            .filter(|(_, line)| line.trim() == code)
            .map(|(number, _)| number)
            .collect();
        assert_eq!(found.len(), 1, "{code}: {found:?}");
        found[0]
    };
    // The publish command is a variable (`publish` or `spublish`): named `publish`.
    let publish_line = line_of(release_source, "redis.call(publish, KEYS[2], ARGV[1])");
    let hset_line = line_of(acquire_source, "redis.call('hset', KEYS[1], ARGV[2], 1)");
    let run = "ERR The user executing the script can't run this command or subcommand";
    assert_eq!(
        refused(
            &format!("{run} {}", at(release, publish_line)),
            "unlocking",
            "o"
        ),
        Refused::Command(Some("publish".into()))
    );
    assert_eq!(
        refused(&format!("{run} {}", at(acquire, hset_line)), "locking", "o"),
        Refused::Command(Some("hset".into()))
    );
    // A line without a call (an `error()` rethrowing a `pcall` reply), an unknown script, no
    // place at all: refused, but Redis did not say which command.
    for place in [
        at(acquire, 1),
        "script: 0000, on @user_script:3.".into(),
        String::new(),
    ] {
        assert_eq!(
            refused(&format!("{run} {place}"), "locking", "o"),
            Refused::Command(None),
            "{place}"
        );
    }
    assert_eq!(
        refused(
            &format!(
                "ERR The user executing the script can't access at least one of the keys \
                 mentioned in the command arguments {}",
                at(acquire, hset_line)
            ),
            "locking",
            "orders"
        ),
        Refused::KeyOf("orders".into())
    );
    assert_eq!(
        refused(
            &format!(
                "ERR The user executing the script can't publish to the channel mentioned \
                 in the command {}",
                at(release, publish_line)
            ),
            "unlocking",
            "orders"
        ),
        Refused::ChannelOf("orders".into())
    );
}

/// The refusals of the prelude's `acl_check`, raised before a script writes anything, verbatim
/// from redis-server 7.0.15.
#[test]
fn prelude_refusals_name_the_command_or_channel() {
    let place = "script: 4ad9dd692dc423b17ced85a938b09c2b69c971aa, on @user_script:19.";
    assert_eq!(
        refused(
            &format!("NOPERM this user has no permissions to run the 'hdel' command {place}"),
            "unlocking",
            "o"
        ),
        Refused::Command(Some("hdel".into()))
    );
    assert_eq!(
        refused(
            &format!(
                "NOPERM this user has no permissions to access one of the channels used as \
                 arguments {place}"
            ),
            "unlocking",
            "orders"
        ),
        Refused::ChannelOf("orders".into())
    );
}

/// On a cluster the scripts' `publish` variable holds `spublish`.
#[test]
fn a_refused_publish_on_a_cluster_is_spublish() {
    let err = Error::PermissionDenied {
        refused: Refused::Command(Some("publish".into())),
        source: reply("NOPERM x"),
    };
    assert!(!err.to_string().contains("`+spublish`"));
    let err = err.sharded();
    assert!(err.to_string().contains("grant `+spublish`"), "{err}");
}

#[test]
fn other_errors_are_not_refusals() {
    for line in [
        "ERR unknown command 'foo'",
        "ERR user_script:1: Script attempted to access nonexistent global variable",
        "NOSCRIPT No matching script",
    ] {
        let err = Error::from_redis(reply(line), "locking", "o", Duration::from_secs(1));
        assert!(!err.is_auth(), "{line}: {err:?}");
    }
}

/// The messages say what was refused and which ACL rule grants it.
#[test]
fn permission_messages() {
    let message = |refused: Refused| {
        Error::PermissionDenied {
            refused,
            source: reply("NOPERM x"),
        }
        .to_string()
    };
    assert_eq!(
        message(Refused::KeyOf("orders".into())),
        "redis refused the ACL user access to a key of `orders`; grant a key pattern (`~`) \
         covering it (see the ACL section of latchkey's README)"
    );
    assert_eq!(
        message(Refused::ChannelOf("orders".into())),
        "redis refused the ACL user access to a channel of `orders`; grant a channel \
         pattern (`&`) covering it (see the ACL section of latchkey's README)"
    );
    assert_eq!(
        message(Refused::Channel("redisson_lock__channel:{o}".into())),
        "redis refused the ACL user access to the channel `redisson_lock__channel:{o}`; \
         grant a channel pattern (`&`) covering it (see the ACL section of latchkey's README)"
    );
    assert_eq!(
        message(Refused::Command(None)),
        "redis refused the ACL user a command run by a script; grant the missing command \
         (`+<command>`) (see the ACL section of latchkey's README)"
    );
}

/// One value of every variant: its own predicate is true, every other variant's own
/// predicate is false. The `match` is exhaustive (inside the crate `#[non_exhaustive]` does
/// not apply), so a new variant without a predicate does not compile here.
#[test]
fn every_variant_has_its_own_predicate() {
    fn own(err: &Error) -> (&'static str, fn(&Error) -> bool) {
        match err {
            Error::InvalidArgument { .. } => ("InvalidArgument", Error::is_invalid_argument),
            Error::NotOwner { .. } => ("NotOwner", Error::is_not_owner),
            Error::WrongType { .. } => ("WrongType", Error::is_wrong_type),
            Error::WaitTimedOut { .. } => ("WaitTimedOut", Error::is_wait_timed_out),
            Error::Timeout { .. } => ("Timeout", Error::is_uncertain),
            Error::Unreachable { .. } => ("Unreachable", Error::is_unreachable),
            Error::AuthFailed { .. } => ("AuthFailed", Error::is_auth_failed),
            Error::PermissionDenied { .. } => ("PermissionDenied", Error::is_permission_denied),
            Error::Config { .. } => ("Config", Error::is_config),
            Error::FeatureDisabled { .. } => ("FeatureDisabled", Error::is_feature_disabled),
            Error::QuorumUnavailable { .. } => ("QuorumUnavailable", Error::is_quorum_unavailable),
            Error::NotInitialized { .. } => ("NotInitialized", Error::is_not_initialized),
            Error::RateNotSet { .. } => ("RateNotSet", Error::is_rate_not_set),
            Error::UnknownPermit { .. } => ("UnknownPermit", Error::is_unknown_permit),
            Error::OverRelease { .. } => ("OverRelease", Error::is_over_release),
            Error::Codec { .. } => ("Codec", Error::is_codec),
            Error::NotReplicated { .. } => ("NotReplicated", Error::is_not_replicated),
            Error::Closed => ("Closed", Error::is_closed),
            Error::Redis(_) => ("Redis", Error::is_redis),
        }
    }
    let source = || driver_error(io::ErrorKind::ConnectionRefused);
    let all = [
        Error::invalid("lease", "too long"),
        Error::NotOwner { name: "n".into() },
        Error::WrongType {
            key: "k".into(),
            detail: "a string".into(),
        },
        Error::WaitTimedOut {
            name: "n".into(),
            waited: Duration::from_secs(1),
        },
        Error::Timeout {
            timeout: Duration::from_secs(1),
            context: "locking",
        },
        Error::Unreachable {
            context: "connecting",
            source: source(),
        },
        Error::AuthFailed { source: source() },
        Error::PermissionDenied {
            refused: Refused::Command(None),
            source: source(),
        },
        Error::Config {
            reason: "bad url".into(),
        },
        Error::FeatureDisabled {
            feature: "tls",
            what: "the TLS url `rediss://h:1`".into(),
        },
        Error::QuorumUnavailable {
            acquired: 1,
            nodes: 3,
            quorum: 2,
        },
        Error::NotInitialized { name: "n".into() },
        Error::RateNotSet { name: "n".into() },
        Error::UnknownPermit {
            name: "n".into(),
            permit: "p".into(),
        },
        Error::OverRelease {
            name: "n".into(),
            released: 2,
            total: 1,
        },
        Error::Codec {
            reason: "not json".into(),
        },
        Error::NotReplicated {
            name: "n".into(),
            timeout: Duration::from_secs(1),
            required: 1,
            acknowledged: 0,
        },
        Error::Closed,
        Error::Redis(source()),
    ];
    let predicates: Vec<_> = all.iter().map(own).collect();
    let mut names: Vec<_> = predicates.iter().map(|(name, _)| *name).collect();
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), all.len(), "one value of each variant");
    for err in &all {
        let (mine, _) = own(err);
        for (name, predicate) in &predicates {
            assert_eq!(predicate(err), *name == mine, "{name} predicate on {err:?}");
        }
    }
}
