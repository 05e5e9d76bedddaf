//! Unit tests of `crate::election`.

use super::*;

fn change(version: u64, term: u64, leader: Option<&str>) -> Change {
    Change {
        version,
        term,
        leader: leader.map(str::to_owned),
    }
}

fn leader(value: &str, term: u64) -> Option<Leader> {
    Some(Leader {
        value: value.to_owned(),
        term,
        owner: None,
    })
}

#[test]
fn log_entries_parse() {
    assert_eq!(Change::parse("3:7:L:a:b"), Some(change(3, 7, Some("a:b"))));
    assert_eq!(Change::parse("4:7:N:"), Some(change(4, 7, None)));
    assert_eq!(Change::parse("4:7:X:"), None);
    assert_eq!(Change::parse("junk"), None);
    assert_eq!(parse_payload("12:node:1"), leader("node:1", 12));
    assert_eq!(parse_payload("x:node"), None);
}

/// The first read yields the current state only; later reads yield every logged change
/// after it, in order, then the current state if it is newer; nothing goes back.
#[test]
fn the_cursor_yields_every_change_once_in_order() {
    let mut cursor = Cursor::default();
    let first = cursor.advance(Snapshot {
        leader: leader("a", 1),
        term: 1,
        log: vec![change(1, 1, Some("a"))],
    });
    assert_eq!(first, vec![leader("a", 1)]);
    let next = cursor.advance(Snapshot {
        leader: leader("c", 2),
        term: 2,
        log: vec![
            change(1, 1, Some("a")),
            change(2, 1, Some("b")),
            change(3, 1, None),
            change(4, 2, Some("c")),
        ],
    });
    assert_eq!(next, vec![leader("b", 1), None, leader("c", 2)]);
    // An expiry is seen from the state (no log entry), once; the campaign's log entry for
    // it later is not yielded again.
    let expired = Snapshot {
        leader: None,
        term: 2,
        log: vec![change(4, 2, Some("c"))],
    };
    assert_eq!(cursor.advance(expired), vec![None]);
    let again = Snapshot {
        leader: leader("d", 3),
        term: 3,
        log: vec![
            change(4, 2, Some("c")),
            change(5, 2, None),
            change(6, 3, Some("d")),
        ],
    };
    assert_eq!(cursor.advance(again), vec![leader("d", 3)]);
    // An older term never comes after a newer one.
    let stale = Snapshot {
        leader: leader("c", 2),
        term: 3,
        log: vec![change(6, 3, Some("d"))],
    };
    assert_eq!(cursor.advance(stale), vec![]);
}

#[test]
fn no_leader_ever_is_one_change() {
    let mut cursor = Cursor::default();
    let empty = || Snapshot {
        leader: None,
        term: 0,
        log: vec![],
    };
    assert_eq!(cursor.advance(empty()), vec![None]);
    assert_eq!(cursor.advance(empty()), vec![]);
}

#[test]
fn values_are_checked() {
    assert!(check_value("").unwrap_err().is_invalid_argument());
    let long = "x".repeat(Election::MAX_VALUE_LEN + 1);
    assert!(check_value(&long).unwrap_err().is_invalid_argument());
    assert!(check_value("node-a:8080").is_ok());
}
