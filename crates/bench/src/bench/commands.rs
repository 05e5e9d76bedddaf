//! Counting the Redis commands that clients send, from `INFO commandstats` deltas.
//!
//! `INFO commandstats` also counts the commands that scripts run (`redis.call('hset', …)` adds
//! to `cmdstat_hset`), and Redis 7.0 has no per-client command counter. So only these count:
//!
//! * commands a script can never run (`evalsha`, `eval`, `subscribe`, `unsubscribe`, `ping`,
//!   `hello`, `client|…`, `script|…`, …): every call was sent by a client;
//! * `get` and `set`, which scripts do run: the workload's own GET and SET (counted by the
//!   bench itself), plus, for a library that sends plain `set`/`get` itself (rslock acquires with
//!   `SET NX PX`) and whose scripts never run that command, every call.
//!
//! Everything else (`hset`, `publish`, `pexpire`, `incr`, …) ran inside scripts. The JSON report
//! keeps the raw deltas too.

use std::collections::BTreeMap;

use anyhow::Result;
use redis::aio::MultiplexedConnection;

/// Commands no script can run.
const CLIENT_ONLY: &[&str] = &[
    "evalsha",
    "eval",
    "evalsha_ro",
    "eval_ro",
    "fcall",
    "fcall_ro",
    "subscribe",
    "unsubscribe",
    "psubscribe",
    "punsubscribe",
    "ssubscribe",
    "sunsubscribe",
    "ping",
    "hello",
    "select",
    "auth",
    "quit",
    "reset",
    "multi",
    "exec",
    "discard",
    "watch",
    "unwatch",
    "readonly",
    "readwrite",
];

/// Command families (`client|setinfo`, `script|load`, …) no script can run.
const CLIENT_ONLY_FAMILIES: &[&str] = &["client|", "script|", "cluster|", "command|"];

/// Calls per command name.
pub type Calls = BTreeMap<String, u64>;

/// Reads `INFO commandstats`.
pub async fn snapshot(conn: &mut MultiplexedConnection) -> Result<Calls> {
    let text: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(conn)
        .await?;
    Ok(parse(&text))
}

/// `cmdstat_get:calls=12,usec=…` lines → `{"get": 12}`.
pub fn parse(text: &str) -> Calls {
    let mut calls = Calls::new();
    for line in text.lines() {
        let Some(rest) = line.trim().strip_prefix("cmdstat_") else {
            continue;
        };
        let Some((name, fields)) = rest.split_once(':') else {
            continue;
        };
        let n = fields
            .split(',')
            .find_map(|f| f.strip_prefix("calls="))
            .and_then(|n| n.parse().ok())
            .unwrap_or(0);
        calls.insert(name.to_owned(), n);
    }
    calls
}

/// `after - before`, per command (only those that changed).
pub fn delta(before: &Calls, after: &Calls) -> Calls {
    after
        .iter()
        .filter_map(|(name, n)| {
            let d = n.saturating_sub(before.get(name).copied().unwrap_or(0));
            (d > 0).then(|| (name.clone(), d))
        })
        .collect()
}

/// What a library sends as plain `get`/`set` commands (outside scripts).
#[derive(Clone, Copy, Debug)]
pub struct Plain {
    /// The library sends plain `get` and its scripts never run `get`.
    pub get: bool,
    /// The library sends plain `set` and its scripts never run `set`.
    pub set: bool,
}

/// The commands clients sent, per command: see the module docs. `own_get` and `own_set` are
/// the workload's own GET and SET.
pub fn client_sent(delta: &Calls, library: Plain, own_get: u64, own_set: u64) -> Calls {
    let mut sent = Calls::new();
    for (name, n) in delta {
        let client_only = CLIENT_ONLY.contains(&name.as_str())
            || CLIENT_ONLY_FAMILIES.iter().any(|f| name.starts_with(f));
        if client_only {
            sent.insert(name.clone(), *n);
        }
    }
    let get = if library.get {
        delta.get("get").copied().unwrap_or(0)
    } else {
        own_get
    };
    let set = if library.set {
        delta.get("set").copied().unwrap_or(0)
    } else {
        own_set
    };
    for (name, n) in [("get", get), ("set", set)] {
        if n > 0 {
            sent.insert(name.to_owned(), n);
        }
    }
    sent
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_subtracts() {
        let before = parse(
            "# Commandstats\r\ncmdstat_get:calls=2,usec=1\r\ncmdstat_evalsha:calls=5,usec=9\r\n",
        );
        let after = parse("cmdstat_get:calls=10,usec=1\r\ncmdstat_evalsha:calls=9,usec=9\r\ncmdstat_hset:calls=4,usec=1\r\ncmdstat_client|setinfo:calls=2,usec=1\r\n");
        let d = delta(&before, &after);
        assert_eq!(d.get("get"), Some(&8));
        assert_eq!(d.get("evalsha"), Some(&4));
        let sent = client_sent(
            &d,
            Plain {
                get: false,
                set: false,
            },
            3,
            3,
        );
        assert_eq!(sent.get("get"), Some(&3)); // the other 5 ran inside scripts
        assert_eq!(sent.get("set"), Some(&3));
        assert_eq!(sent.get("evalsha"), Some(&4));
        assert_eq!(sent.get("client|setinfo"), Some(&2));
        assert_eq!(sent.get("hset"), None);
        let sent = client_sent(
            &d,
            Plain {
                get: true,
                set: false,
            },
            3,
            0,
        );
        assert_eq!(sent.get("get"), Some(&8));
        assert_eq!(sent.get("set"), None);
    }
}
