//! Small helpers shared by the modules.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use redis::Value;

/// The server family the tests run: Redis, or Valkey with `LATCHKEY_TEST_SERVER=valkey`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Family {
    /// `redis-server`, `redis-sentinel`, `redis-cli` (the default).
    Redis,
    /// `valkey-server`, `valkey-sentinel`, `valkey-cli`.
    Valkey,
}

impl Family {
    /// The family named by `LATCHKEY_TEST_SERVER` (`redis`, the default, or `valkey`).
    ///
    /// # Panics
    ///
    /// If the variable names anything else: a typo must not silently test Redis.
    pub fn current() -> Family {
        match std::env::var("LATCHKEY_TEST_SERVER").as_deref() {
            Err(_) | Ok("") | Ok("redis") => Family::Redis,
            Ok("valkey") => Family::Valkey,
            Ok(other) => panic!("LATCHKEY_TEST_SERVER={other}: use `redis` or `valkey`"),
        }
    }

    /// The family's name for a program: `redis-server` → `valkey-server` under Valkey.
    fn program(self, redis_name: &str) -> String {
        match self {
            Family::Redis => redis_name.to_owned(),
            Family::Valkey => redis_name.replacen("redis", "valkey", 1),
        }
    }
}

/// The program to run for `default` (a Redis program name, found on `PATH` under the name of
/// the [`Family`] under test), unless the environment variable `env` names another.
pub(crate) fn binary(env: &str, default: &str) -> String {
    match std::env::var(env) {
        Ok(path) if !path.is_empty() => path,
        _ => Family::current().program(default),
    }
}

/// Quotes a value for a redis.conf line (double quotes, with `\` and `"` escaped).
pub(crate) fn conf_quote(value: &str) -> String {
    let mut out = String::with_capacity(value.len() + 2);
    out.push('"');
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Percent-encodes everything but RFC 3986 unreserved characters (for URL user info).
pub(crate) fn percent_encode(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for byte in value.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// The last `lines` lines of `text`.
pub(crate) fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    let start = all.len().saturating_sub(lines);
    all[start..].join("\n")
}

/// A reply as text: bulk/simple/verbatim strings, numbers and `OK`; `None` otherwise.
pub(crate) fn value_text(value: &Value) -> Option<String> {
    match value {
        Value::BulkString(bytes) => Some(String::from_utf8_lossy(bytes).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        Value::VerbatimString { text, .. } => Some(text.clone()),
        Value::Okay => Some("OK".to_string()),
        Value::Int(i) => Some(i.to_string()),
        Value::Double(d) => Some(d.to_string()),
        Value::Boolean(b) => Some(b.to_string()),
        _ => None,
    }
}

/// The elements of an array (or set) reply.
pub(crate) fn value_items(value: &Value) -> Vec<Value> {
    match value {
        Value::Array(items) | Value::Set(items) => items.clone(),
        _ => Vec::new(),
    }
}

/// A flat `[k1, v1, k2, v2, ...]` array or a map reply as a map of strings.
pub(crate) fn value_pairs(value: &Value) -> HashMap<String, String> {
    let mut out = HashMap::new();
    match value {
        Value::Array(items) => {
            for pair in items.chunks(2) {
                if let [k, v] = pair {
                    if let (Some(k), Some(v)) = (value_text(k), value_text(v)) {
                        out.insert(k, v);
                    }
                }
            }
        }
        Value::Map(entries) => {
            for (k, v) in entries {
                if let (Some(k), Some(v)) = (value_text(k), value_text(v)) {
                    out.insert(k, v);
                }
            }
        }
        _ => {}
    }
    out
}

/// Parses `INFO` output into `field -> value`.
pub(crate) fn parse_info(text: &str) -> HashMap<String, String> {
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| line.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect()
}

/// Calls `check` every `interval` until it returns `Ok`, or returns the last error once
/// `timeout` has passed.
pub(crate) fn poll_until<T>(
    timeout: Duration,
    interval: Duration,
    mut check: impl FnMut() -> Result<T, String>,
) -> Result<T, String> {
    let deadline = Instant::now() + timeout;
    loop {
        match check() {
            Ok(value) => return Ok(value),
            Err(problem) => {
                if Instant::now() >= deadline {
                    return Err(problem);
                }
            }
        }
        std::thread::sleep(interval);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting_and_encoding() {
        assert_eq!(conf_quote(r#"a "b" \c"#), r#""a \"b\" \\c""#);
        assert_eq!(conf_quote(""), "\"\"");
        assert_eq!(percent_encode("p@ss:w/rd"), "p%40ss%3Aw%2Frd");
        assert_eq!(percent_encode("Az09-._~"), "Az09-._~");
    }

    #[test]
    fn info_parsing() {
        let info = parse_info("# Replication\r\nrole:master\r\nconnected_slaves:2\r\n");
        assert_eq!(info["role"], "master");
        assert_eq!(info["connected_slaves"], "2");
    }

    #[test]
    fn tail_keeps_last_lines() {
        assert_eq!(tail("a\nb\nc\n", 2), "b\nc");
        assert_eq!(tail("a", 5), "a");
    }
}
