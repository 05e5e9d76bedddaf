//! Unit tests of `crate::codec`.

use std::collections::HashMap;

use super::*;

#[test]
fn json_round_trips_and_reports_errors() {
    let bytes = Json.encode(&("a".to_owned(), 1u8)).unwrap();
    let back: (String, u8) = Json.decode(&bytes).unwrap();
    assert_eq!(back, ("a".to_owned(), 1));
    let err = <Json as Codec<u8>>::decode(&Json, b"\"not a number\"").unwrap_err();
    assert!(err.is_codec(), "{err:?}");
    // JSON object keys must be strings: a map with tuple keys cannot be encoded.
    let map: HashMap<(u8, u8), u8> = [((1, 2), 3)].into_iter().collect();
    let err = Json.encode(&map).unwrap_err();
    assert!(err.is_codec(), "{err:?}");
}
