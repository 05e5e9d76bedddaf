//! Choosing free loopback ports.

use std::collections::hash_map::RandomState;
use std::collections::HashSet;
use std::hash::{BuildHasher, Hasher};
use std::net::TcpListener;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{SystemTime, UNIX_EPOCH};

/// Lowest port handed out.
const LOW: u16 = 10_000;
/// One past the highest port handed out. With the cluster bus at `port + 10000` both stay
/// below Linux's default ephemeral range (32768..), so outgoing connections of other
/// programs do not take them.
const HIGH: u16 = 22_000;
/// Offset of the Redis Cluster bus port.
const BUS_OFFSET: u16 = 10_000;

/// The range ports are chosen in: `LATCHKEY_TEST_PORTS=<low>-<high>` (inside `10000..22000`),
/// so that test processes running at the same time never choose the same port (CI runs the
/// chaos scenarios, which restart servers on their ports, beside the other tests); the whole
/// range by default.
///
/// # Panics
///
/// If `LATCHKEY_TEST_PORTS` is set but is not such a range.
fn range() -> (u16, u16) {
    static RANGE: OnceLock<(u16, u16)> = OnceLock::new();
    *RANGE.get_or_init(|| match std::env::var("LATCHKEY_TEST_PORTS") {
        Err(_) => (LOW, HIGH),
        Ok(value) => parse_range(&value).unwrap_or_else(|| {
            panic!(
                "LATCHKEY_TEST_PORTS={value:?}: expected <low>-<high> with \
                 {LOW} <= low < high <= {HIGH}"
            )
        }),
    })
}

/// `<low>-<high>` inside `LOW..HIGH`, at least 100 ports wide.
fn parse_range(value: &str) -> Option<(u16, u16)> {
    let (low, high) = value.split_once('-')?;
    let (low, high): (u16, u16) = (low.trim().parse().ok()?, high.trim().parse().ok()?);
    (LOW <= low && high <= HIGH && low < high && high - low >= 100).then_some((low, high))
}

/// Ports this process has handed out already; they are not handed out again (until the
/// whole range has been used), so two servers started at the same time cannot pick the
/// same port before either has bound it.
static HANDED_OUT: Mutex<Option<HashSet<u16>>> = Mutex::new(None);
static COUNTER: AtomicU64 = AtomicU64::new(0);

/// A pseudo-random number, different on every call and in every process.
fn random_u64() -> u64 {
    let mut hasher = RandomState::new().build_hasher();
    hasher.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    hasher.write_u32(std::process::id());
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    hasher.write_u128(nanos);
    hasher.finish()
}

fn can_bind(port: u16) -> bool {
    TcpListener::bind(("127.0.0.1", port)).is_ok()
}

/// Returns a loopback port that is free right now, chosen at random in `10000..22000` (or the
/// range `LATCHKEY_TEST_PORTS` gives), whose Redis Cluster bus port (`port + 10000`, so below
/// 32000) is free as well.
///
/// Another process may still take the port before it is used; [`crate::ServerBuilder::spawn`]
/// notices a failed bind and retries with another port. A port is never returned twice by
/// the same process until the whole range has been handed out.
///
/// # Panics
///
/// If no free port is found after many attempts.
pub fn free_port() -> u16 {
    let (low, high) = range();
    let span = u64::from(high - low);
    for _ in 0..10_000 {
        let port = low + (random_u64() % span) as u16;
        {
            let mut guard = HANDED_OUT.lock().unwrap_or_else(|e| e.into_inner());
            let set = guard.get_or_insert_with(HashSet::new);
            if set.len() as u64 >= span / 2 {
                set.clear();
            }
            if set.contains(&port) {
                continue;
            }
            if !(can_bind(port) && can_bind(port + BUS_OFFSET)) {
                continue;
            }
            set.insert(port);
        }
        return port;
    }
    panic!("latchkey-test-support: no free loopback port found in {low}..{high}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_are_in_range_and_distinct() {
        let ports: Vec<u16> = (0..50).map(|_| free_port()).collect();
        let distinct: HashSet<u16> = ports.iter().copied().collect();
        assert_eq!(distinct.len(), ports.len());
        let (low, high) = range();
        for port in ports {
            assert!((low..high).contains(&port), "{port}");
            assert!(port + BUS_OFFSET < 55_000 + BUS_OFFSET);
        }
    }

    #[test]
    fn a_port_range_is_parsed_inside_the_whole_range() {
        assert_eq!(parse_range("10000-14000"), Some((10_000, 14_000)));
        assert_eq!(parse_range(" 14000 - 22000 "), Some((14_000, 22_000)));
        for bad in [
            "",
            "14000",
            "9000-12000",
            "14000-23000",
            "14000-14050",
            "b-a",
            "2-1",
        ] {
            assert_eq!(parse_range(bad), None, "{bad:?}");
        }
    }
}
